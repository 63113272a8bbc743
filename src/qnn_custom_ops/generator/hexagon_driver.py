"""The Hexagon check's driver: a program that reads cases, calls the package's C ABI and
times each call between marks the packet counter finds (``runtime.hexagon`` builds and runs it)."""

from __future__ import annotations

from pathlib import Path

from .render import template_environment


def driver_ops(package_dir: Path) -> list[str]:
    """The ops of the package's C ABI, in the order of the driver's table."""
    return sorted(path.name[: -len("CApi.cpp")] for path in (package_dir / "host/src/ops").glob("*CApi.cpp"))


def render_driver(package_dir: Path, package_name: str) -> str:
    """The driver's C++ for the package in ``package_dir``, named ``package_name`` in its config."""
    functions = [f"qco_{package_name}_{op}" for op in driver_ops(package_dir)]
    return (
        template_environment().get_template("hexagon/driver.cpp.j2").render(package=package_name, functions=functions)
    )
