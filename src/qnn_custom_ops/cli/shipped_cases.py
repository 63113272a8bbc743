"""The cases a shipped package brings of its own, by PackageName: what ``cost`` measures and
what the Hexagon check runs when the user gives no ``--shape``. A registry, so commands ask
it instead of knowing any package by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..opdef import OpPackage
from ..runtime.cost import KernelCase, cases_from_shapes
from ..runtime.dtype_cases import dtype_cases


@dataclass(frozen=True)
class ShippedCases:
    cost: Callable[[OpPackage], list[KernelCase]]  # shapes the package's ops are measured on
    check: Callable[[OpPackage], list[KernelCase]]  # cases of the Hexagon check, every datatype


def _llm_cost_cases(package: OpPackage) -> list[KernelCase]:
    from ..llm_ops.cost_cases import llm_cases

    return [case.kernel_case() for case in llm_cases()]


def _llm_check_cases(package: OpPackage) -> list[KernelCase]:
    from ..llm_ops.check_cases import hexagon_cases

    return hexagon_cases(package)


#: SplitCustomOp halves an even last dimension, into two outputs of their own encodings: a
#: small shape and one whose halves (257) end off every vector boundary; a prefill-like one.
SPLIT_CHECK_SHAPES = (
    "SplitCustomOp:first_half=2x3x5x4,second_half=2x3x5x4,input=2x3x5x8",
    "SplitCustomOp:first_half=1x2x3x257,second_half=1x2x3x257,input=1x2x3x514",
)
SPLIT_COST_SHAPES = ("SplitCustomOp:first_half=1x1x2048x2048,second_half=1x1x2048x2048,input=1x1x2048x4096",)


def _split_cost_cases(package: OpPackage) -> list[KernelCase]:
    return cases_from_shapes(package, SPLIT_COST_SHAPES)


def _split_check_cases(package: OpPackage) -> list[KernelCase]:
    return dtype_cases(package, SPLIT_CHECK_SHAPES)


SHIPPED_CASES: dict[str, ShippedCases] = {
    "LlmOpPackage": ShippedCases(_llm_cost_cases, _llm_check_cases),
    "SplitCustomOpPackage": ShippedCases(_split_cost_cases, _split_check_cases),
}


def shipped_cases(package: OpPackage) -> ShippedCases | None:
    """The package's own cases, or None for a package that brings none."""
    return SHIPPED_CASES.get(package.name)
