"""The cases a shipped package brings of its own, by PackageName: what ``cost`` measures and
what the Hexagon check runs when the user gives no ``--shape``. A registry, so commands ask
it instead of knowing any package by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..opdef import OpPackage
from ..runtime.cost import KernelCase


@dataclass(frozen=True)
class ShippedCases:
    cost: Callable[[OpPackage], list[KernelCase]]  # shapes the package's ops are measured on
    check: Callable[[OpPackage], list[KernelCase]]  # cases of the Hexagon check, every datatype


def _llm_cost_cases(package: OpPackage) -> list[KernelCase]:
    from .cases import llm_cases

    return [case.kernel_case() for case in llm_cases()]


def _llm_check_cases(package: OpPackage) -> list[KernelCase]:
    from .check_cases import hexagon_cases

    return hexagon_cases(package)


SHIPPED_CASES: dict[str, ShippedCases] = {"LlmOpPackage": ShippedCases(_llm_cost_cases, _llm_check_cases)}


def shipped_cases(package: OpPackage) -> ShippedCases | None:
    """The package's own cases, or None for a package that brings none."""
    return SHIPPED_CASES.get(package.name)
