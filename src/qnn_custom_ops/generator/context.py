"""Render contexts: every decision about the generated C++ is made here, in Python.

Templates only place these strings. Every identifier below comes from the validated
OpDef model (op and package names are checked identifiers, tensor names are sanitised
``c_name``s); free text reaches C++ only through ``comment_lines``.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

from ..opdef import Datatype, OpDef, OpPackage, Role, TensorDef
from ..opdef.datatypes import DATATYPES

HTP_ARCHS = (68, 69, 73, 75, 79)

#: Hexagon tools version per HTP architecture, as the QNN SDK's HTP Makefile pairs them.
HEXAGON_TOOLS = {68: "8.4.09", 69: "8.5.03", 73: "8.6.02", 75: "8.7.03", 79: "8.8.02"}

#: The oldest QNN SDK whose HTP headers the generated code compiles against (the tensor
#: format code that tells a flat tensor from a blocked one arrived after 2.13).
MIN_QNN_SDK = "2.25"


def comment_lines(text: str, width: int = 88) -> list[str]:
    """Free text as ``//`` comment bodies that cannot end the comment or continue it."""
    printable = "".join(ch if ch.isprintable() else " " for ch in text)
    safe = printable.replace("*/", "* /").replace("/*", "/ *").replace("??", "? ?")
    lines = textwrap.wrap(" ".join(safe.split()), width) or []
    return [line.rstrip("\\ ") for line in lines]


def cpp_string(text: str) -> str:
    """A C++ string literal for any text: printable ASCII kept, everything else escaped."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif " " <= ch <= "~" and ch != "?":
            out.append(ch)
        else:
            out.extend(f"\\{byte:03o}" for byte in ch.encode("utf-8"))
    return '"' + "".join(out) + '"'


@dataclass(frozen=True)
class Arg:
    """One argument of the op's Impl and kernel functions."""

    name: str  # C++ identifier
    xml_name: str
    kind: str  # input | output | param
    qualifier: str  # "const " for inputs and params: only outputs are written
    optional: bool
    comment: str
    declared: list[str]  # kernel dtypes (qco::DType without "k") the HTP may hand this argument

    @property
    def declared_mask(self) -> str:
        """``declared`` as the C++ bit set the HTP adapter takes."""
        return " | ".join(f"qco::htp::bit(qco::DType::k{name})" for name in self.declared) or "0"


@dataclass(frozen=True)
class HtpImpl:
    """One registered HTP implementation: the HTP dispatches on a fixed input count."""

    name: str
    input_count: int
    params: list[str]  # C++ parameter declarations: outputs, the present inputs, params
    call: list[str]  # what it passes to the shared body for each argument of the op


@dataclass(frozen=True)
class ParamOrderEntry:
    literal: str  # the XML name as a C++ string literal
    mandatory: bool
    default_ref: str  # "nullptr" or "&sg_..."
    note: str


@dataclass(frozen=True)
class ScalarDefault:
    """A ``static Qnn_Param_t`` holding a scalar parameter default."""

    variable: str
    datatype: str
    member: str
    literal: str


@dataclass(frozen=True)
class OpContext:
    name: str
    body: str  # the one function every HtpImpl calls
    body_params: list[str]  # its C++ parameter declarations
    impls: list[HtpImpl]
    description: list[str]
    outputs: list[Arg]
    inputs: list[Arg]
    params: list[Arg]
    param_order: list[ParamOrderEntry]
    scalar_defaults: list[ScalarDefault]
    min_inputs: int
    max_inputs: int
    min_params: int  # through the C ABI, where every optional param may be absent
    min_htp_params: int  # on the HTP, which fills in only the defaults it can apply
    max_params: int
    abi_args: list[str]  # C ABI expressions for each Impl argument, in Impl order

    @property
    def args(self) -> list[Arg]:
        """Outputs, then inputs, then params, each in XML order (the HTP Impl order)."""
        return self.outputs + self.inputs + self.params


@dataclass(frozen=True)
class PackageContext:
    name: str
    domain: str
    version: str
    ops: list[OpContext]
    config_files: list[str]
    htp_archs: tuple[int, ...] = HTP_ARCHS
    hexagon_tools: tuple[tuple[int, str], ...] = tuple(HEXAGON_TOOLS.items())
    min_sdk: str = MIN_QNN_SDK

    @property
    def htp_targets(self) -> list[str]:
        return ["htp_x86", "htp_aarch64"] + [f"htp_v{arch}" for arch in self.htp_archs]


def package_context(package: OpPackage, config_files: list[str]) -> PackageContext:
    return PackageContext(
        name=package.name,
        domain=package.domain,
        version=package.version,
        ops=[op_context(op) for op in package.ops.values()],
        config_files=[" ".join(comment_lines(name, 1000)) for name in config_files],
    )


def _htp_datatypes(op: OpDef, tensor: TensorDef) -> tuple[Datatype, ...]:
    """What the HTP accepts for a tensor (supplemental lists applied) -- the package's target."""
    return op.datatypes(tensor, op.htp_backend) if op.htp_backend else tensor.datatypes


def op_context(op: OpDef) -> OpContext:
    def arg(tensor: TensorDef) -> Arg:
        return _arg(tensor, _htp_datatypes(op, tensor))

    defaults = [d for d in (_scalar_default(op, p) for p in op.params) if d is not None]
    defaulted = {d.variable for d in defaults}
    optional_inputs = sum(1 for t in op.inputs if not t.mandatory)
    optional_params = sum(1 for p in op.params if not p.mandatory)
    outputs, inputs, params = [arg(t) for t in op.outputs], [arg(t) for t in op.inputs], [arg(p) for p in op.params]
    min_inputs = len(op.inputs) - optional_inputs
    impl = f"{op.name[0].lower()}{op.name[1:]}Impl"
    return OpContext(
        name=op.name,
        body=f"{impl}Body",
        body_params=[f"Tensor& {a.name}" for a in outputs] + [f"const Tensor* {a.name}" for a in inputs + params],
        impls=[
            _htp_impl(impl, outputs, inputs, params, count, min_inputs)
            for count in range(len(op.inputs), min_inputs - 1, -1)
        ],
        description=comment_lines(op.description),
        outputs=outputs,
        inputs=inputs,
        params=params,
        param_order=[_param_order_entry(op, p, defaults) for p in op.params],
        scalar_defaults=defaults,
        min_inputs=min_inputs,
        max_inputs=len(op.inputs),
        min_params=len(op.params) - optional_params,
        min_htp_params=sum(1 for p in op.params if _default_variable(op, p) not in defaulted),
        max_params=len(op.params),
        abi_args=_abi_args(op),
    )


def _htp_impl(
    impl: str, outputs: list[Arg], inputs: list[Arg], params: list[Arg], count: int, min_inputs: int
) -> HtpImpl:
    """The implementation registered for ``count`` inputs; absent optional inputs are nullptr.

    The HTP registers fixed-arity implementations, so every input count the Interface
    accepts gets its own, all calling one body.
    """
    present = inputs[:count]
    return HtpImpl(
        name=impl if count == len(inputs) else f"{impl}_{count}Inputs",
        input_count=count,
        params=[f"{a.qualifier}Tensor& {a.name}" for a in outputs + present + params],
        call=[a.name for a in outputs]
        + [f"&{a.name}" for a in present]
        + ["nullptr"] * (len(inputs) - count)
        + [f"&{a.name}" for a in params],
    )


def _abi_args(op: OpDef) -> list[str]:
    """How the C ABI passes each argument: outputs by index, optional trailing ones absent."""
    return (
        [f"outputs[{i}]" for i in range(len(op.outputs))]
        + [f"arg_at(inputs, num_inputs, {i})" for i in range(len(op.inputs))]
        + [f"arg_at(params, num_params, {i})" for i in range(len(op.params))]
    )


def _arg(tensor: TensorDef, datatypes: tuple[Datatype, ...]) -> Arg:
    names = ", ".join(d.short_name for d in datatypes)
    rank = "ND" if tensor.shape.rank is None else f"rank {tensor.shape.rank}"
    optional = "optional" if not tensor.mandatory else "mandatory"
    return Arg(
        name=tensor.c_name,
        xml_name=tensor.name,
        kind=tensor.kind,
        qualifier="" if tensor.kind is Role.OUTPUT else "const ",
        optional=not tensor.mandatory,
        comment=" ".join(comment_lines(f"{tensor.kind} {tensor.name}: {optional}, {rank}, {names}", 1000)),
        declared=_declared_kernel_dtypes(tensor, datatypes),
    )


def _declared_kernel_dtypes(tensor: TensorDef, datatypes: tuple[Datatype, ...]) -> list[str]:
    """Kernel dtypes the HTP may hand an argument: its datatypes that have a kernel tag and an
    HTP carrier (an enum param arrives as UINT_32)."""
    if tensor.is_enum:
        datatypes = (Datatype.UINT_32,)
    rows = [DATATYPES[d] for d in datatypes]
    return [r.kernel for r in rows if r.kernel is not None and r.htp is not None]


def _scalar_default(op: OpDef, param: TensorDef) -> ScalarDefault | None:
    """A C++ default for a scalar param whose XML default parsed as its datatype."""
    if param.mandatory or param.default is None or param.default.value is None:
        return None
    if param.shape.rank not in (0, None) and not param.is_enum:
        return None
    value = param.default.value
    if isinstance(value, (tuple, str)):
        return None
    datatype = Datatype.UINT_32 if param.is_enum else param.datatypes[0]
    member = DATATYPES[datatype].scalar_member
    if member is None:
        return None
    return ScalarDefault(
        variable=_default_variable(op, param),
        datatype=datatype.value,
        member=member,
        literal=_cpp_literal(value, datatype),
    )


def _cpp_literal(value: bool | int | float, datatype: Datatype) -> str:
    if datatype == Datatype.BOOL_8:
        return "1" if value else "0"
    if datatype.is_integer:
        number = int(value)
        if datatype == Datatype.INT_64 and number == -(2**63):
            return "(-9223372036854775807LL - 1)"  # the literal 9223372036854775808LL does not exist
        if datatype.bits == 64:
            return f"{number}{'ULL' if datatype.name.startswith('UINT') else 'LL'}"
        return f"{number}{'u' if datatype.name.startswith('UINT') else ''}"
    real = float(value)
    if not math.isfinite(real):
        raise ValueError(f"non-finite default {value!r} reached code generation")
    text = repr(real)
    return f"{text}f" if datatype != Datatype.FLOAT_64 else text


def _default_variable(op: OpDef, param: TensorDef) -> str:
    return f"sg_opDefault{op.name}_{param.c_name}"


def _param_order_entry(op: OpDef, param: TensorDef, defaults: list[ScalarDefault]) -> ParamOrderEntry:
    variable = _default_variable(op, param)
    has_default = any(d.variable == variable for d in defaults)
    note = ""
    if not param.mandatory and param.default is not None and not has_default:
        note = (
            "XML default is not a scalar literal; the builder always passes this param"
            if param.default.value is not None
            else "XML default does not parse; the builder always passes this param"
        )
    return ParamOrderEntry(
        literal=cpp_string(param.name),
        mandatory=param.mandatory,
        default_ref=f"&{variable}" if has_default else "nullptr",
        note=" ".join(comment_lines(note, 1000)),
    )
