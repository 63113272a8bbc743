"""Kernel cases for every datatype an op declares: random inputs and encodings from the OpDef.

The Hexagon check runs each case on the host and under the emulator and compares the bits,
so a case must exercise what the HTP hands a kernel: per datatype the op's outputs declare
(FLOAT_32, FLOAT_16, UFIXED_POINT_8/16, SFIXED_POINT_8/16, ...), every tensor that may carry it
carries it, with a random encoding of QNN's convention (real = scale * (q + offset)).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from ..errors import UsageError
from ..generator.abi import KernelDType
from ..opdef import Datatype, OpDef, OpPackage, TensorDef
from ..opdef.datatypes import DATATYPES
from .cost import KernelCase, check_case_size, named_shapes, shape_label, shape_specs
from .kernel_abi import KernelTensor

#: The dims every tensor of an op gets when no shape is given, cut to the tensor's rank (ND: 4).
DEFAULT_DIMS = (2, 3, 5, 9, 2, 2, 2, 2)


def _has_kernel_dtype(datatype: Datatype) -> bool:
    return DATATYPES[datatype].kernel is not None


def case_datatypes(op: OpDef) -> list[Datatype]:
    """The datatypes the op's first output may have on the HTP: one case each."""
    return [d for d in op.datatypes(op.outputs[0], "HTP") if _has_kernel_dtype(d)]


def tensor_datatype(tensor: TensorDef, op: OpDef, wanted: Datatype) -> Datatype:
    """What ``tensor`` carries in the case of ``wanted``: ``wanted`` if it may, else its first
    datatype of the same kind (fixed point, float), else its first datatype with a kernel tag."""
    declared = [d for d in op.datatypes(tensor, "HTP") if _has_kernel_dtype(d)]
    if not declared:
        raise UsageError(f"{op.name}: {tensor.name} declares no datatype a kernel can take")
    if wanted in declared:
        return wanted
    same_kind = [d for d in declared if d.is_fixed_point == wanted.is_fixed_point and d.is_float == wanted.is_float]
    return (same_kind or declared)[0]


def random_tensor(datatype: Datatype, dims: tuple[int, ...], generator: np.random.Generator) -> KernelTensor:
    """Random data of ``datatype``: normal floats, codes over the whole range with a random
    encoding (zero point inside the range for unsigned, symmetric for signed), integer zeros
    (valid as indices into anything)."""
    kernel = KernelDType[DATATYPES[datatype].kernel_tag]
    numpy_type = np.dtype(DATATYPES[datatype].numpy)
    if datatype.is_float:
        return KernelTensor(generator.standard_normal(dims).astype(numpy_type), kernel)
    if not datatype.is_fixed_point:
        return KernelTensor(np.zeros(dims, dtype=numpy_type), kernel)
    low, high = datatype.integer_range
    codes = generator.integers(low, high, size=dims, endpoint=True).astype(numpy_type)
    scale = float(generator.uniform(0.005, 0.05))
    zero_point = 0 if datatype.is_signed else int(generator.integers(high // 4, 3 * high // 4))
    return KernelTensor(codes, kernel, scale, -zero_point)


def _shapes(op: OpDef, assignments: str, where: str) -> dict[str, tuple[int, ...]]:
    """Every input and output of ``op`` named once in ``assignments``, or (none named) the
    default dims cut to each tensor's rank."""
    if not assignments:
        return {t.name: DEFAULT_DIMS[: 4 if t.shape.rank is None else t.shape.rank] for t in op.outputs + op.inputs}
    return named_shapes(op, assignments, where)


def _wanted(op: OpDef, datatypes: Collection[Datatype], where: str) -> list[Datatype]:
    """The op's case datatypes that ``datatypes`` names (all when it names none); one it does
    not declare is an error naming what it does."""
    declared = case_datatypes(op)
    missing = [d.short_name for d in datatypes if d not in declared]
    if missing:
        raise UsageError(
            f"{where}: {op.name} declares no output datatype {', '.join(missing)} "
            f"(it declares {', '.join(d.short_name for d in declared)})"
        )
    return [d for d in declared if not datatypes or d in datatypes]


def dtype_cases(
    package: OpPackage, specs: Sequence[str] = (), seed: int = 0, only: Collection[Datatype] = ()
) -> list[KernelCase]:
    """One case per op and declared datatype (those ``only`` names, when it names any) for
    each ``Op:tensor=DIMS,...`` spec (or each op of the package with default dims when no spec
    is given); labels name the datatype."""
    generator = np.random.default_rng(seed)
    cases = []
    for op, assignments, where in shape_specs(package, list(specs) or list(package.ops)):
        shapes = _shapes(op, assignments, where)
        label = shape_label(op, shapes)
        for wanted in _wanted(op, only, where):
            datatypes = {t.name: tensor_datatype(t, op, wanted) for t in op.outputs + op.inputs}
            check_case_size(shapes, datatypes, where)
            made = {name: random_tensor(datatypes[name], dims, generator) for name, dims in shapes.items()}
            cases.append(
                KernelCase(
                    op.name,
                    f"{wanted.short_name} {label}",
                    tuple(made[t.name] for t in op.outputs),
                    tuple(made[t.name] for t in op.inputs),
                    default_shape=not assignments,
                )
            )
    return cases
