"""The Hexagon check's driver: a program that reads cases, calls the package's C ABI and
times each call between marks the packet counter finds (``runtime.hexagon`` builds and runs it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from .render import template_environment


def driver_ops(package_dir: Path, called: Iterable[str] | None = None) -> list[str]:
    """The ops of the package's C ABI in the order of the driver's table: those of ``called``
    only, when given (a check of one op compiles one op's kernel, not the package's)."""
    ops = sorted(path.name[: -len("CApi.cpp")] for path in (package_dir / "host/src/ops").glob("*CApi.cpp"))
    if called is None:
        return ops
    wanted = set(called)
    return [op for op in ops if op in wanted]


def render_driver(package_name: str, ops: Sequence[str]) -> str:
    """The driver's C++ calling ``ops`` of the package named ``package_name`` in its config."""
    functions = [f"qco_{package_name}_{op}" for op in ops]
    return (
        template_environment().get_template("hexagon/driver.cpp.j2").render(package=package_name, functions=functions)
    )
