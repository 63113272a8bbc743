"""torch -> OpDef XML, for users who start from an existing torch op."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from lxml import etree

from ..errors import UsageError
from ..opdef import Datatype, OpDefError, OpDefWarning, parse_package
from ..opdef.identifiers import identifier_problem, scope_name_problem
from .alignment import AlignmentError, ArgKind, arg_kind, bind_ops, op_name
from .op_name import OperatorName

#: A static (weight) input: float, and the weight datatype of each quant_dtype
#: (8a8w int8 symmetric, 16a8w uint8, 16a16w int16 symmetric).
STATIC_DATATYPES = (
    Datatype.FLOAT_32.value,
    Datatype.SFIXED_POINT_8.value,
    Datatype.UFIXED_POINT_8.value,
    Datatype.SFIXED_POINT_16.value,
)
_INT_32_RANGE = range(-(2**31), 2**31)
_PARAM_DATATYPE = {
    ArgKind.INT: Datatype.INT_32.value,
    ArgKind.INT_LIST: Datatype.INT_32.value,
    ArgKind.FLOAT: Datatype.FLOAT_32.value,
    ArgKind.FLOAT_LIST: Datatype.FLOAT_32.value,
    ArgKind.BOOL: Datatype.BOOL_8.value,
    ArgKind.STR: Datatype.UINT_32.value,
}


def qnn_type_for(overload: torch._ops.OpOverload) -> str:
    """A QNN op type name for a torch op: ``my_ops::fused_rms_norm`` -> ``FusedRmsNorm``."""
    name = OperatorName.of(overload).name
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"_+", name) if part)


def opdef_from_torch(
    op_overload: Any,
    *,
    package: str,
    qnn_op_type: str | None = None,
    enums: Mapping[str, Sequence[str]] | None = None,
    domain: str = "custom",
    version: str = "1.0",
) -> str:
    """An OpDef XML config for an existing torch op, ready for ``generate-op-package`` and ``bind``.

    Tensor arguments become inputs and returns outputs, with FLOAT_32 and UFIXED_POINT_8 (the
    HTP's activations); other arguments become parameters named as in the schema. A ``str``
    argument needs its values in ``enums`` ({"mode": ["mean", "rms"]}).
    """
    return opdefs_from_torch(
        {qnn_op_type or qnn_type_for(op_overload): op_overload},
        package=package,
        enums=enums,
        domain=domain,
        version=version,
    )


@dataclass(frozen=True)
class TensorChoices:
    """How tensors are declared: ``dtypes`` names the datatypes of some by name (indices as
    ``INT_32``, say; a parameter's too, e.g. ``INT_64``), ``static`` marks weights
    (``IsStaticTensor``), ``activations`` the fixed-point widths of the others besides FLOAT_32."""

    dtypes: Mapping[str, Sequence[str]] = field(default_factory=dict)
    static: frozenset[str] = frozenset()
    activations: tuple[int, ...] = (8,)

    def datatypes(self, name: str) -> tuple[str, ...]:
        if name in self.dtypes:
            return tuple(self.dtypes[name])
        if name in self.static:
            return STATIC_DATATYPES
        return (Datatype.FLOAT_32.value, *(Datatype[f"UFIXED_POINT_{bits}"].value for bits in self.activations))


def tensor_choices(dtypes: Sequence[str] = (), static: Sequence[str] = (), activations: str = "8") -> TensorChoices:
    """``TensorChoices`` from the CLI's ``--dtype ARG=DT[,DT]``, ``--static ARG``, ``--activations 8,16``."""
    parsed: dict[str, list[str]] = {}
    for item in dtypes:
        name, _, names = item.partition("=")
        found = [Datatype.parse(n) for n in names.split(",") if n]
        known = [d for d in found if d is not None]
        if not name or not found or len(known) != len(found):
            raise UsageError(f"--dtype {item!r}: expected ARG=DATATYPE[,DATATYPE] with QNN datatypes such as INT_32")
        parsed[name] = [d.value for d in known]
    widths = tuple(int(w) for w in activations.split(",") if w.strip().isdigit())
    if not widths or any(w not in (8, 16) for w in widths):
        raise UsageError(f"--activations {activations!r}: expected 8, 16 or 8,16")
    return TensorChoices(parsed, frozenset(static), widths)


def opdefs_from_torch(
    ops: Mapping[str, Any],
    *,
    package: str,
    enums: Mapping[str, Sequence[str]] | None = None,
    tensors: TensorChoices = TensorChoices(),
    domain: str = "custom",
    version: str = "1.0",
) -> str:
    """One config holding an OpDef per ``{qnn_op_type: overload}``."""
    for what, name, problem in (
        ("package", package, scope_name_problem(package)),
        *(("op", op, identifier_problem(op)) for op in ops),
    ):
        if problem:
            raise UsageError(f"{name!r} cannot name a QNN {what}: {problem}")
    root = etree.Element("OpDefCollection", PackageName=package, Domain=domain, Version=version)
    op_list = etree.SubElement(root, "OpDefList")
    for qnn_type, overload in ops.items():
        if not isinstance(overload, torch._ops.OpOverload):
            raise TypeError(f"{overload!r} is not an op overload: pass e.g. torch.ops.my_ops.mul3.default")
        op_list.append(_opdef(qnn_type, overload, enums or {}, tensors))
    etree.indent(root, space="  ")
    xml = etree.tostring(root, xml_declaration=True, encoding="UTF-8", pretty_print=True).decode()
    _check_round_trip(xml, ops)
    return xml


def _check_round_trip(xml: str, ops: Mapping[str, torch._ops.OpOverload]) -> None:
    """The config must load without a warning and bind to the very ops it came from, so a case
    the checks above do not foresee is refused here instead of written."""
    names = ", ".join(map(op_name, ops.values()))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OpDefWarning)
            package = parse_package(xml.encode(), "<config for " + names + ">")
        bind_ops(package, ops)
    except (OpDefError, AlignmentError) as exc:
        raise UsageError(
            f"{names}: the config would not load and bind as written, so nothing is written:\n{exc}"
        ) from exc
    if package.warnings:
        raise UsageError(
            f"{names}: the config would load with warnings, so nothing is written:\n" + "\n".join(package.warnings)
        )


def _opdef(
    qnn_type: str, overload: torch._ops.OpOverload, enums: Mapping[str, Sequence[str]], tensors: TensorChoices
) -> etree._Element:
    _check_functional(overload)
    schema = overload._schema
    opdef = etree.Element("OpDef")
    etree.SubElement(opdef, "Name").text = qnn_type
    description = etree.SubElement(opdef, "Description")
    etree.SubElement(description, "Content").text = f"QNN op for torch {op_name(overload)}: {schema}"
    params = []
    for arg in schema.arguments:
        kind, optional = arg_kind(arg.type)
        if kind is ArgKind.TENSOR:
            opdef.append(_tensor("Input", arg.name, not optional, tensors))
        elif kind is ArgKind.UNSUPPORTED:
            raise UsageError(
                f"{op_name(overload)}: argument '{arg.name}' of type {arg.type} has no QNN "
                "equivalent (use Tensor, int, float, bool, str, int[] or float[])"
            )
        else:
            params.append(_param(overload, arg, kind, optional, enums, tensors.dtypes.get(arg.name)))
    returns = schema.returns
    for index, ret in enumerate(returns):
        if arg_kind(ret.type) != (ArgKind.TENSOR, False):
            raise UsageError(f"{op_name(overload)}: returns {ret.type}; QNN ops return Tensors")
        name = ret.name or ("output" if len(returns) == 1 else f"output_{index}")
        opdef.append(_tensor("Output", name, True, tensors))
    opdef.extend(params)
    etree.SubElement(opdef, "SupportedBackend").text = "HTP"
    return opdef


def _check_functional(overload: torch._ops.OpOverload) -> None:
    """A QNN op reads input tensors and returns new ones: nothing mutated, something in, something out."""
    schema, name = overload._schema, op_name(overload)
    for arg in schema.arguments:
        if arg.alias_info is not None and arg.alias_info.is_write:
            raise UsageError(
                f"{name}: argument '{arg.name}' is mutated ({arg.type}(a!)); QNN ops are functional: "
                "write the config for the functional op that returns its result"
            )
    if not any(arg_kind(arg.type)[0] is ArgKind.TENSOR for arg in schema.arguments):
        raise UsageError(f"{name}: has no Tensor argument; a QNN op takes at least one input tensor")
    if not schema.returns:
        raise UsageError(f"{name}: returns (); a QNN op returns at least one Tensor (return the result)")


def _tensor(tag: str, name: str, mandatory: bool, tensors: TensorChoices) -> etree._Element:
    element = etree.Element(tag)
    etree.SubElement(element, "Name").text = name
    etree.SubElement(element, "Mandatory").text = "true" if mandatory else "false"
    for datatype in tensors.datatypes(name):
        etree.SubElement(element, "Datatype").text = datatype
    shape = etree.SubElement(element, "Shape")
    etree.SubElement(shape, "Rank").text = "ND"
    if tag == "Input" and name in tensors.static:
        etree.SubElement(element, "IsStaticTensor").text = "true"
    return element


def _param(
    overload: torch._ops.OpOverload,
    arg: Any,
    kind: ArgKind,
    optional: bool,
    enums: Mapping[str, Sequence[str]],
    dtypes: Sequence[str] | None,
) -> etree._Element:
    element = etree.Element("Parameter")
    etree.SubElement(element, "Name").text = arg.name
    has_default = arg.has_default_value()
    etree.SubElement(element, "Mandatory").text = "false" if (optional or has_default) else "true"
    _check_default(overload, arg, kind, enums, dtypes)
    for datatype in dtypes or (_PARAM_DATATYPE[kind],):
        etree.SubElement(element, "Datatype").text = datatype
    shape = etree.SubElement(element, "Shape")
    etree.SubElement(shape, "Rank").text = "1D" if kind in (ArgKind.INT_LIST, ArgKind.FLOAT_LIST) else "SCALAR"
    if has_default and arg.default_value is not None:
        etree.SubElement(element, "Default").text = _default_text(arg.default_value)
    if kind is ArgKind.STR:
        values = enums.get(arg.name)
        if not values:
            raise UsageError(
                f"{op_name(overload)}: str argument '{arg.name}' needs its allowed values: "
                f"pass enums={{'{arg.name}': [...]}}"
            )
        enumeration = etree.SubElement(element, "Enumeration")
        for value in values:
            etree.SubElement(enumeration, "Enum").text = value
    return element


def _check_default(
    overload: torch._ops.OpOverload,
    arg: Any,
    kind: ArgKind,
    enums: Mapping[str, Sequence[str]],
    dtypes: Sequence[str] | None,
) -> None:
    """A schema default the written parameter cannot hold, refused with the option that fixes it."""
    default = arg.default_value if arg.has_default_value() else None
    where = f"{op_name(overload)}: default {default!r} of '{arg.name}'"
    if kind is ArgKind.STR and default is not None and default not in enums.get(arg.name, (default,)):
        raise UsageError(f"{where} is not one of its values {list(enums[arg.name])}: add it to --enum {arg.name}=...")
    values = default if isinstance(default, (list, tuple)) else [default]
    if (
        kind in (ArgKind.INT, ArgKind.INT_LIST)
        and dtypes is None
        and any(v is not None and v not in _INT_32_RANGE for v in values)
    ):
        raise UsageError(f"{where} does not fit INT_32: pass --dtype {arg.name}=INT_64")


def _default_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_default_text(v) for v in value) + "]"
    return str(value) if not isinstance(value, float) else repr(value)
