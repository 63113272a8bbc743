"""The QHPI flavour of an op package: the same ``kernels/<Op>.h`` behind QAIRT's C plugin interface.

QHPI (``HTP/core/qhpi.h``) registers kernels as plain C structs: per op, one ``QHPI_Kernel_v1``
per combination of tensor signatures. The HTP runtime hands a kernel every tensor as a flat
4-D buffer and every QNN parameter as one more trailing input, so the adapter here sees
``inputs`` = the op's present inputs, then its present parameters, each in OpDef order; a
parameter left out of a node (an optional one, trailing) gets its OpDef default. No HTP C++
header is needed: ``include/qco/qhpi_abi.h`` declares the ABI's facts, and one x86 build loads
into every QAIRT that has QHPI.

Every decision is made here; the templates under ``templates/qhpi/`` only place the strings.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..opdef import Datatype, OpDef, OpPackage, TensorDef
from ..opdef.datatypes import DATATYPES, HTP_DTYPES, QHPI_ELEMENT_TYPES
from .context import HEXAGON_TOOLS, HTP_ARCHS, Arg, ScalarDefault, op_context

#: The HTP runtime hands every tensor as 4-D, so the rank an ND tensor had in the graph is lost:
#: the adapter drops its leading 1s down to this rank (the kernels take [rows, n] for [n]).
ND_MIN_RANK = 2

#: Kernels registered per op and arity at most: past this, the arguments with the most
#: datatypes take any element type (the adapter still checks each against the OpDef).
MAX_SIGNATURES = 64


@dataclass(frozen=True)
class QhpiArg:
    """One argument as the adapter reads it."""

    arg: Arg
    rank: int  # the rank the kernel sees: the OpDef's, or for ND at least 2 (the runtime pads to 4-D)
    element_types: tuple[str, ...]  # QHPI element type names this argument may arrive as
    default: ScalarDefault | None = None  # a parameter's OpDef default, when it has one
    default_dtype: str = ""  # qco::DType (without "k") of that default
    default_c_type: str = ""

    @property
    def name(self) -> str:
        return self.arg.name

    @property
    def declared_mask(self) -> str:
        """The kernel dtypes the OpDef declares, as the adapter's bit set."""
        return " | ".join(f"qco::qhpi::bit(qco::DType::k{name})" for name in self.arg.declared) or "0"


@dataclass(frozen=True)
class QhpiKernel:
    """One ``QHPI_Kernel_v1``: an arity and an element type per output, then per input."""

    function: str  # the C function the runtime calls
    inputs: int  # op inputs present
    params: int  # parameters present, trailing after the inputs
    output_types: tuple[str, ...]
    input_types: tuple[str, ...]  # inputs then params: what the runtime passes

    @property
    def signature_name(self) -> str:
        return "_".join((self.function, *self.output_types, *self.input_types))

    @property
    def output_signatures(self) -> str:
        return ", ".join(map(_signature, self.output_types))

    @property
    def input_signatures(self) -> str:
        return ", ".join(map(_signature, self.input_types))


def _signature(element_type: str) -> str:
    """A flat 4-D tensor in DDR, read through ``qhpi_tensor_raw_data``."""
    return f"{{QHPI_{element_type}, QHPI_LAYOUT_FLAT_4, QHPI_STORAGE_DIRECT, QHPI_MEM_LOC_DDR_ONLY}}"


@dataclass(frozen=True)
class QhpiOp:
    name: str
    outputs: list[QhpiArg]
    inputs: list[QhpiArg]
    params: list[QhpiArg]
    arities: list[tuple[int, int]]  # (inputs, params) present, every pair the interface accepts
    kernels: list[QhpiKernel]
    description: list[str]

    @property
    def args(self) -> list[QhpiArg]:
        return self.outputs + self.inputs + self.params

    @property
    def param_names(self) -> list[str]:
        return [p.arg.xml_name for p in self.params]

    @property
    def max_runtime_inputs(self) -> int:
        """The most tensors the runtime passes as inputs: every input and every parameter (at least 1)."""
        return max(len(self.inputs) + len(self.params), 1)

    @property
    def view_addresses(self) -> str:
        return ", ".join(f"&{a.name}" for a in self.args)

    @property
    def kernel_call(self) -> str:
        return ", ".join(f"{a.name}.view" for a in self.args)


def qhpi_element_types(datatypes: tuple[Datatype, ...], is_enum: bool = False) -> tuple[str, ...]:
    """QHPI element types (named as in ``qhpi.h``) the runtime may hand for these datatypes; QHPI
    numbers them as the HTP's ``DType``. An enum parameter arrives as its UINT_32 index."""
    carriers = (DATATYPES[Datatype.UINT_32].htp,) if is_enum else (DATATYPES[d].htp for d in datatypes)
    return tuple(dict.fromkeys(QHPI_ELEMENT_TYPES[HTP_DTYPES.index(c)] for c in carriers if c in _QHPI_HTP))


_QHPI_HTP = set(HTP_DTYPES[: len(QHPI_ELEMENT_TYPES)])


def _qhpi_arg(arg: Arg, tensor: TensorDef, datatypes: tuple[Datatype, ...], default: ScalarDefault | None) -> QhpiArg:
    rank = -ND_MIN_RANK if tensor.shape.rank is None else tensor.shape.rank
    dtype, c_type = "", ""
    if default is not None:
        row = DATATYPES[Datatype(default.datatype)]
        dtype, c_type = row.kernel or "", row.c_type or ""
    return QhpiArg(arg, rank, qhpi_element_types(datatypes, tensor.is_enum), default, dtype, c_type)


def _signatures(args: list[QhpiArg]) -> list[tuple[str, ...]]:
    """Every combination of the arguments' element types, at most ``MAX_SIGNATURES``: the
    arguments with the most types are widened to ANY until the product fits."""
    choices = [list(a.element_types) or ["ELEMENT_TYPE_ANY"] for a in args]
    while math.prod(len(options) for options in choices) > MAX_SIGNATURES:
        widest = max(range(len(choices)), key=lambda i: (len(choices[i]), -i))
        choices[widest] = ["ELEMENT_TYPE_ANY"]
    return list(itertools.product(*choices))


def qhpi_op(op: OpDef) -> QhpiOp:
    """The QHPI adapter of one op: its arguments, the arities it accepts, its kernels."""
    ctx = op_context(op)
    htp = op.htp_backend
    defaults = {d.variable.removeprefix(f"sg_opDefault{op.name}_"): d for d in ctx.scalar_defaults}

    def made(args: list[Arg], tensors: tuple[TensorDef, ...]) -> list[QhpiArg]:
        return [
            _qhpi_arg(a, t, op.datatypes(t, htp) if htp else t.datatypes, defaults.get(t.c_name))
            for a, t in zip(args, tensors)
        ]

    outputs, inputs, params = made(ctx.outputs, op.outputs), made(ctx.inputs, op.inputs), made(ctx.params, op.params)
    # Parameters may be left out only from the end, and only those with a default the adapter applies.
    min_params = len(params)
    while min_params and params[min_params - 1].default is not None:
        min_params -= 1
    arities = [
        (i, p) for i in range(ctx.max_inputs, ctx.min_inputs - 1, -1) for p in range(len(params), min_params - 1, -1)
    ]
    kernels = []
    for present_inputs, present_params in arities:
        function = f"qco_{op.name}_{present_inputs}in_{present_params}p"
        for types in _signatures(outputs + inputs[:present_inputs] + params[:present_params]):
            kernels.append(
                QhpiKernel(function, present_inputs, present_params, types[: len(outputs)], types[len(outputs) :])
            )
    return QhpiOp(op.name, outputs, inputs, params, arities, kernels, ctx.description)


@dataclass(frozen=True)
class QhpiPackage:
    name: str
    ops: list[QhpiOp]
    config_files: list[str]
    htp_archs: tuple[int, ...] = HTP_ARCHS
    hexagon_tools: tuple[tuple[int, str], ...] = tuple(HEXAGON_TOOLS.items())


def qhpi_package(package: OpPackage, config_files: list[str]) -> QhpiPackage:
    return QhpiPackage(package.name, [qhpi_op(op) for op in package.ops.values()], config_files)


def abi_header_context() -> dict[str, list[tuple[str, str]]]:
    """The enumerators ``qhpi_abi.h`` declares: QNN's datatypes and QHPI's element types."""
    return {
        "qnn_datatypes": [(d.name, f"0x{d.qnn_code:04X}") for d in Datatype if d.qnn_code is not None],
        "qhpi_types": [(name, str(value)) for value, name in enumerate(QHPI_ELEMENT_TYPES)],
    }


def qhpi_files(
    package: OpPackage, config_files: list[str], htp_carriers: list[tuple[str, list[str]]]
) -> list[tuple[PurePosixPath, str, dict]]:
    """(path, template, context) of every file the QHPI flavour writes besides the shared ones;
    ``htp_carriers``: the kernel dtypes each HTP dtype may carry (the classic adapter's table)."""
    ctx = qhpi_package(package, config_files)
    return [
        (PurePosixPath("Makefile"), "qhpi/Makefile.j2", {"package": ctx}),
        (PurePosixPath("include/qco/qhpi_abi.h"), "qhpi/abi.h.j2", abi_header_context()),
        (PurePosixPath("include/qco/qhpi_adapter.h"), "qhpi/adapter.h.j2", {"carriers": qhpi_carriers(htp_carriers)}),
        (PurePosixPath(f"src/{ctx.name}Interface.cpp"), "qhpi/interface.cpp.j2", {"package": ctx}),
        *((PurePosixPath(f"src/ops/{op.name}.cpp"), "qhpi/op.cpp.j2", {"package": ctx, "op": op}) for op in ctx.ops),
    ]


#: Signed static tensors the HTP runtime re-encodes as unsigned (measured on QAIRT 2.47, 2.50.40
#: and 2.51: int8 with offset 0 arrives as uint8 with zero point 128, int16 as uint16 with zero
#: point 32768): per QHPI type, the signed kernel dtype an argument declares and what it is handed.
REENCODED_SIGNED = {"QUINT8": ("SFixed8", "UFixed8"), "QUINT16": ("SFixed16", "UFixed16")}


def qhpi_carriers(htp_carriers: list[tuple[str, list[str]]]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Per QHPI element type, (declared, handed) kernel dtypes, first match wins: the kernel
    dtypes the type may carry, fixed point first, as declared (QUINT8 is UFIXED_POINT_8, UINT_8 or
    BOOL_8); then a signed fixed-point declaration the runtime re-encoded as this unsigned type."""
    by_htp = dict(htp_carriers)
    carriers = []
    for htp, name in zip(HTP_DTYPES, QHPI_ELEMENT_TYPES):
        if htp in by_htp:
            pairs = [(kernel, kernel) for kernel in by_htp[htp]]
            carriers.append((name, pairs + ([REENCODED_SIGNED[name]] if name in REENCODED_SIGNED else [])))
    return carriers
