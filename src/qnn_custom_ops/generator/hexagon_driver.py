"""The Hexagon check's driver: a program that reads cases, calls the package's C ABI and
times each call between marks the packet counter finds (``runtime.hexagon`` builds and runs it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .render import template_environment


def driver_ops(ops: Iterable[str], called: Iterable[str] | None = None) -> list[str]:
    """The package's ``ops`` (its OpDef's) in the order of the driver's table: those of ``called``
    only, when given (a check of one op compiles one op's kernel, not the package's)."""
    wanted = None if called is None else set(called)
    return [op for op in sorted(ops) if wanted is None or op in wanted]


def render_driver(package_name: str, ops: Sequence[str]) -> str:
    """The driver's C++ calling ``ops`` of the package named ``package_name`` in its config."""
    functions = [f"qco_{package_name}_{op}" for op in ops]
    return (
        template_environment().get_template("hexagon/driver.cpp.j2").render(package=package_name, functions=functions)
    )
