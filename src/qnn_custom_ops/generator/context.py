"""Render contexts: every decision about the generated C++ is made here, in Python.

Templates only place these strings. Every identifier below comes from the validated
OpDef model (op and package names are checked identifiers, tensor names are sanitised
``c_name``s); free text reaches C++ only through ``comment_lines``.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass

from ..opdef import Datatype, OpDef, OpPackage, TensorDef

HTP_ARCHS = (68, 69, 73, 75, 79)

# Qnn_Scalar_t union member for each scalar datatype.
_SCALAR_MEMBER = {
    Datatype.BOOL_8: "bool8Value",
    Datatype.INT_8: "int8Value",
    Datatype.INT_16: "int16Value",
    Datatype.INT_32: "int32Value",
    Datatype.INT_64: "int64Value",
    Datatype.UINT_8: "uint8Value",
    Datatype.UINT_16: "uint16Value",
    Datatype.UINT_32: "uint32Value",
    Datatype.UINT_64: "uint64Value",
    Datatype.FLOAT_16: "floatValue",
    Datatype.FLOAT_32: "floatValue",
    Datatype.FLOAT_64: "doubleValue",
}


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
    template_type: str  # HTP Impl type (TensorType, TensorType1, Tensor)
    optional: bool
    comment: str


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
    impl: str
    cost_func: str
    description: list[str]
    template_params: list[str]
    template_args: str
    outputs: list[Arg]
    inputs: list[Arg]
    params: list[Arg]
    param_order: list[ParamOrderEntry]
    scalar_defaults: list[ScalarDefault]
    min_inputs: int
    max_inputs: int
    min_params: int
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
    return op.datatypes(tensor, "HTP") if "HTP" in op.backends else tensor.datatypes


def op_context(op: OpDef) -> OpContext:
    template_types = _template_types(op)

    def tensor_arg(tensor: TensorDef) -> Arg:
        return _arg(tensor, template_types[_htp_datatypes(op, tensor)], _htp_datatypes(op, tensor))

    defaults = [d for d in (_scalar_default(op, p) for p in op.params) if d is not None]
    optional_inputs = sum(1 for t in op.inputs if not t.mandatory)
    optional_params = sum(1 for p in op.params if not p.mandatory)
    return OpContext(
        name=op.name,
        impl=f"{op.name[0].lower()}{op.name[1:]}Impl",
        cost_func=f"{op.name[0].lower()}{op.name[1:]}CostFunc",
        description=comment_lines(op.description),
        template_params=sorted(set(template_types.values()), key=_template_index),
        template_args=", ".join("Tensor" for _ in set(template_types.values())),
        outputs=[tensor_arg(t) for t in op.outputs],
        inputs=[tensor_arg(t) for t in op.inputs],
        params=[_arg(p, "Tensor", _htp_datatypes(op, p)) for p in op.params],
        param_order=[_param_order_entry(op, p, defaults) for p in op.params],
        scalar_defaults=defaults,
        min_inputs=len(op.inputs) - optional_inputs,
        max_inputs=len(op.inputs),
        min_params=len(op.params) - optional_params,
        max_params=len(op.params),
        abi_args=_abi_args(op),
    )


def _abi_args(op: OpDef) -> list[str]:
    """How the C ABI passes each argument: outputs by index, optional trailing ones absent."""
    return (
        [f"outputs[{i}]" for i in range(len(op.outputs))]
        + [f"arg_at(inputs, num_inputs, {i})" for i in range(len(op.inputs))]
        + [f"arg_at(params, num_params, {i})" for i in range(len(op.params))]
    )


def _template_types(op: OpDef) -> dict[tuple[Datatype, ...], str]:
    """One Impl template type per distinct datatype set of the op's tensors."""
    types: dict[tuple[Datatype, ...], str] = {}
    for tensor in op.outputs + op.inputs:
        datatypes = _htp_datatypes(op, tensor)
        if datatypes not in types:
            index = len(types)
            types[datatypes] = "TensorType" if index == 0 else f"TensorType{index}"
    return types


def _template_index(name: str) -> int:
    digits = re.sub(r"\D", "", name)
    return int(digits) if digits else 0


def _arg(tensor: TensorDef, template_type: str, datatypes: tuple[Datatype, ...]) -> Arg:
    names = ", ".join(d.short_name for d in datatypes)
    rank = "ND" if tensor.shape.rank is None else f"rank {tensor.shape.rank}"
    optional = "optional" if not tensor.mandatory else "mandatory"
    return Arg(
        name=tensor.c_name,
        xml_name=tensor.name,
        kind=tensor.kind,
        qualifier="" if tensor.kind == "output" else "const ",
        template_type=template_type,
        optional=not tensor.mandatory,
        comment=" ".join(comment_lines(f"{tensor.kind} {tensor.name}: {optional}, {rank}, {names}", 1000)),
    )


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
    member = _SCALAR_MEMBER.get(datatype)
    if member is None:
        return None
    return ScalarDefault(
        variable=f"sg_opDefault{op.name}_{param.c_name}",
        datatype=datatype.value,
        member=member,
        literal=_cpp_literal(value, datatype),
    )


def _cpp_literal(value: bool | int | float, datatype: Datatype) -> str:
    if datatype == Datatype.BOOL_8:
        return "1" if value else "0"
    if datatype.is_integer:
        number = int(value)
        if datatype.bits == 64:
            return f"{number}{'ULL' if datatype.name.startswith('UINT') else 'LL'}"
        return f"{number}{'u' if datatype.name.startswith('UINT') else ''}"
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"non-finite default {value!r} reached code generation")
    text = repr(number)
    return f"{text}f" if datatype != Datatype.FLOAT_64 else text


def _param_order_entry(op: OpDef, param: TensorDef, defaults: list[ScalarDefault]) -> ParamOrderEntry:
    variable = f"sg_opDefault{op.name}_{param.c_name}"
    has_default = any(d.variable == variable for d in defaults)
    note = ""
    if not param.mandatory and param.default is not None and not has_default:
        note = ("XML default is not a scalar literal; the builder always passes this param"
                if param.default.value is not None
                else "XML default does not parse; the builder always passes this param")
    return ParamOrderEntry(
        literal=cpp_string(param.name),
        mandatory=param.mandatory,
        default_ref=f"&{variable}" if has_default else "nullptr",
        note=" ".join(comment_lines(note, 1000)),
    )
