"""Align an OpDef with a ``torch.library`` schema, once, and report every mismatch.

Inputs match the schema's Tensor arguments by position; parameters match the other
arguments by name (QNN orders parameters by name, torch by position). The result, an
``OpBinding``, is trusted by the custom op builder, the quantizer and the lowering.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ReportedError
from ..opdef import Datatype, OpDef, OpPackage, TensorDef
from .op_name import OperatorName


class ArgKind(enum.Enum):
    """What a schema argument carries, as far as QNN is concerned."""

    TENSOR = "Tensor"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "str"
    INT_LIST = "int[]"
    FLOAT_LIST = "float[]"
    UNSUPPORTED = "unsupported"


_SCALAR_KINDS = {
    "IntType": ArgKind.INT,
    "SymIntType": ArgKind.INT,
    "FloatType": ArgKind.FLOAT,
    "BoolType": ArgKind.BOOL,
    "StringType": ArgKind.STR,
    "TensorType": ArgKind.TENSOR,
}
_LIST_KINDS = {ArgKind.INT: ArgKind.INT_LIST, ArgKind.FLOAT: ArgKind.FLOAT_LIST}


def arg_kind(jit_type: Any) -> tuple[ArgKind, bool]:
    """(kind, optional) of a schema argument type such as ``Optional[List[int]]``."""
    optional = jit_type.kind() == "OptionalType"
    if optional:
        jit_type = jit_type.getElementType()
    if jit_type.kind() == "ListType":
        element = _SCALAR_KINDS.get(jit_type.getElementType().kind(), ArgKind.UNSUPPORTED)
        return _LIST_KINDS.get(element, ArgKind.UNSUPPORTED), optional
    return _SCALAR_KINDS.get(jit_type.kind(), ArgKind.UNSUPPORTED), optional


@dataclass(frozen=True)
class ArgBinding:
    """One XML input or parameter and the schema argument it is bound to."""

    tensor: TensorDef
    schema_index: int
    schema_name: str
    kind: ArgKind
    optional: bool  # the schema accepts None


@dataclass(frozen=True)
class OpBinding:
    """A QNN op type bound to a torch overload whose schema agrees with the OpDef."""

    opdef: OpDef
    package_name: str
    overload: torch._ops.OpOverload
    inputs: tuple[ArgBinding, ...]  # XML input order
    params: tuple[ArgBinding, ...]  # XML parameter order

    @property
    def custom_op_name(self) -> str:
        """``ns.op.overload``: the name executorch's QNN backend matches nodes by."""
        return op_name(self.overload)

    @property
    def qnn_op_type(self) -> str:
        return self.opdef.name


@dataclass(frozen=True)
class AlignmentProblem:
    op: str
    argument: str
    xml: str
    schema: str
    fix: str

    def __str__(self) -> str:
        return f"{self.op}: {self.argument}: the XML says {self.xml}, the schema says {self.schema} ({self.fix})"


class AlignmentError(ReportedError, ValueError):
    """Every mismatch between the OpDefs and the torch schemas they were bound to."""

    def __init__(self, problems: list[AlignmentProblem]):
        self.problems = tuple(problems)
        super().__init__(
            f"{len(problems)} mismatch(es) between OpDef and torch schema:\n" + "\n".join(f"  {p}" for p in problems)
        )


def op_name(overload: torch._ops.OpOverload) -> str:
    """``ns.op.overload`` of a torch overload, e.g. ``my_ops.mul3.default``."""
    return OperatorName.of(overload).dotted


def target_op_name(target: Any) -> str | None:
    """``ns.op.overload`` of an fx node target (an OpOverload or executorch's EdgeOpOverload)."""
    if not isinstance(target, torch._ops.OpOverload):
        target = getattr(target, "_op", None)  # EdgeOpOverload wraps the OpOverload
    return op_name(target) if isinstance(target, torch._ops.OpOverload) else None


def overload_name(overload: Any) -> str:
    return getattr(overload, "_qualified_op_name", None) or str(overload)


def bind_ops(package: OpPackage, mapping: Mapping[str, Any]) -> dict[str, OpBinding]:
    """Check every (QNN op type, torch overload) pair; raise ``AlignmentError`` with all problems."""
    problems: list[AlignmentProblem] = []
    bindings: dict[str, OpBinding] = {}
    seen: dict[Any, str] = {}
    for qnn_type, overload in mapping.items():
        op = package.ops.get(qnn_type)
        if op is None:
            problems.append(
                AlignmentProblem(
                    qnn_type,
                    "op",
                    "nothing (no such OpDef)",
                    overload_name(overload),
                    f"use one of {', '.join(package.ops)}",
                )
            )
            continue
        if isinstance(overload, torch._ops.OpOverloadPacket):
            overloads = ", ".join(f"{overload_name(overload)}.{name}" for name in overload.overloads())
            problems.append(
                AlignmentProblem(
                    qnn_type,
                    "op",
                    f"QNN op {qnn_type}",
                    f"{overload_name(overload)} (an OpOverloadPacket)",
                    f"bind an overload: {overloads}",
                )
            )
            continue
        if not isinstance(overload, torch._ops.OpOverload):
            problems.append(
                AlignmentProblem(
                    qnn_type, "op", f"QNN op {qnn_type}", repr(overload), "bind a torch.ops.<namespace>.<op>.<overload>"
                )
            )
            continue
        if overload in seen:
            problems.append(
                AlignmentProblem(
                    qnn_type,
                    "op",
                    f"QNN op {qnn_type}",
                    f"{overload} already bound to {seen[overload]}",
                    "bind each torch overload to one QNN op",
                )
            )
            continue
        seen[overload] = qnn_type
        binding = _align(op, package.name, overload, problems)
        if binding is not None:
            bindings[qnn_type] = binding
    if problems:
        raise AlignmentError(problems)
    return bindings


def _align(
    op: OpDef, package_name: str, overload: torch._ops.OpOverload, problems: list[AlignmentProblem]
) -> OpBinding | None:
    schema = overload._schema
    before = len(problems)

    def problem(argument: str, xml: str, schema_says: str, fix: str) -> None:
        problems.append(AlignmentProblem(op.name, argument, xml, schema_says, fix))

    arguments = list(enumerate(schema.arguments))
    for _, arg in arguments:
        if arg.alias_info is not None and arg.alias_info.is_write:
            problem(
                arg.name,
                "an input",
                f"{arg.type}(a!) (mutated)",
                "bind the functional overload, not an in-place or out= variant",
            )
    kinds = {index: arg_kind(arg.type) for index, arg in arguments}
    tensor_args = [(i, a) for i, a in arguments if kinds[i][0] is ArgKind.TENSOR]
    other_args = {a.name: (i, a) for i, a in arguments if kinds[i][0] is not ArgKind.TENSOR}

    if len(tensor_args) != len(op.inputs):
        problem(
            "inputs",
            f"{len(op.inputs)} input(s) ({', '.join(t.name for t in op.inputs)})",
            f"{len(tensor_args)} Tensor argument(s) ({', '.join(a.name for _, a in tensor_args)})",
            "declare one <Input> per Tensor argument, in schema order",
        )
    inputs = []
    for tensor, (index, arg) in zip(op.inputs, tensor_args):
        optional = kinds[index][1]
        if optional == tensor.mandatory:
            problem(
                f"input {tensor.name} (schema {arg.name})",
                f"Mandatory={str(tensor.mandatory).lower()}",
                str(arg.type),
                "make the input <Mandatory>false</Mandatory> exactly when the schema says Tensor?",
            )
        inputs.append(_arg_binding(tensor, index, arg, kinds[index]))

    params = []
    for tensor in op.params:
        if tensor.c_name not in other_args:
            problem(
                f"param {tensor.name}",
                "a parameter",
                "no argument of that name",
                f"add '{tensor.c_name}' to the schema or remove the <Parameter>",
            )
            continue
        index, arg = other_args.pop(tensor.c_name)
        _check_param(op, tensor, arg, kinds[index], problem)
        params.append(_arg_binding(tensor, index, arg, kinds[index]))
    for _, arg in other_args.values():
        problem(
            f"argument {arg.name}",
            "no parameter of that name",
            str(arg.type),
            f"add <Parameter><Name>{arg.name}</Name> to {op.name} or remove it from the schema",
        )

    returns = schema.returns
    if len(returns) != len(op.outputs):
        problem(
            "outputs",
            f"{len(op.outputs)} output(s)",
            f"{len(returns)} return(s)",
            "declare one <Output> per returned Tensor",
        )
    for ret in returns:
        if arg_kind(ret.type) != (ArgKind.TENSOR, False):
            problem("outputs", "a tensor output", f"returns {ret.type}", "return Tensors only")
    if len(problems) != before:
        return None
    return OpBinding(op, package_name, overload, tuple(inputs), tuple(params))


def _arg_binding(tensor: TensorDef, index: int, arg: Any, kind: tuple[ArgKind, bool]) -> ArgBinding:
    return ArgBinding(tensor, index, arg.name, kind[0], kind[1])


def _datatype_names(tensor: TensorDef) -> str:
    return "/".join(d.short_name for d in tensor.datatypes)


_KIND_ACCEPTS = {
    ArgKind.INT: (lambda d: d.is_integer, "an integer datatype (INT_*/UINT_*)"),
    ArgKind.INT_LIST: (lambda d: d.is_integer, "an integer datatype (INT_*/UINT_*)"),
    ArgKind.FLOAT: (lambda d: d.is_float, "a FLOAT_* datatype"),
    ArgKind.FLOAT_LIST: (lambda d: d.is_float, "a FLOAT_* datatype"),
    ArgKind.BOOL: (lambda d: d == Datatype.BOOL_8, "BOOL_8"),
    ArgKind.STR: (lambda d: d.is_integer, "an <Enumeration> (strings become enum indices)"),
}


def _check_param(op: OpDef, tensor: TensorDef, arg: Any, kind: tuple[ArgKind, bool], problem) -> None:
    """Type, rank, optionality and default of one parameter against its schema argument."""
    arg_kind_, optional = kind
    where = f"param {tensor.name}"
    if arg_kind_ in (ArgKind.TENSOR, ArgKind.UNSUPPORTED):
        problem(where, "a parameter", str(arg.type), "use int, float, bool, str, int[] or float[] for parameters")
        return
    accepts, wanted = _KIND_ACCEPTS[arg_kind_]
    if arg_kind_ is ArgKind.STR and not tensor.is_enum:
        problem(where, _datatype_names(tensor), "str", "declare an <Enumeration> for a str argument")
    elif not tensor.datatypes or not all(accepts(d) for d in tensor.datatypes):
        problem(where, _datatype_names(tensor), str(arg.type), f"use {wanted}")
    is_list = arg_kind_ in (ArgKind.INT_LIST, ArgKind.FLOAT_LIST)
    rank = tensor.shape.rank
    if is_list and rank not in (1, None):
        problem(where, f"rank {rank}", str(arg.type), "a list argument needs <Rank>1D</Rank>")
    if not is_list and rank not in (0, None):
        problem(where, f"rank {rank}", str(arg.type), "a scalar argument needs <Rank>SCALAR</Rank>")
    has_default = arg.has_default_value()
    if (optional or has_default) == tensor.mandatory:
        problem(
            where,
            f"Mandatory={str(tensor.mandatory).lower()}",
            f"{arg.type}{' = ' + repr(arg.default_value) if has_default else ''}",
            "a parameter is <Mandatory>false</Mandatory> exactly when the schema gives a default or allows None",
        )
    if has_default and arg.default_value is not None and tensor.default is not None:
        xml_value = tensor.default.value
        schema_value = _comparable_default(arg.default_value, tensor)
        if xml_value is None or not _defaults_equal(xml_value, schema_value):
            problem(
                where,
                f"Default {tensor.default.text!r}",
                f"default {arg.default_value!r}",
                "make the two defaults equal",
            )


def _comparable_default(value: Any, tensor: TensorDef) -> Any:
    """A schema default in the XML model's terms: enum names become indices, lists tuples."""
    if isinstance(value, str) and tensor.is_enum:
        return tensor.enum_values.index(value) if value in tensor.enum_values else value
    if isinstance(value, list):
        return tuple(value)
    return value


def _defaults_equal(xml_value: Any, schema_value: Any) -> bool:
    if isinstance(xml_value, tuple) and isinstance(schema_value, tuple):
        return len(xml_value) == len(schema_value) and all(map(_defaults_equal, xml_value, schema_value))
    if isinstance(xml_value, bool) or isinstance(schema_value, bool):
        return xml_value is schema_value
    if isinstance(xml_value, float) or isinstance(schema_value, float):
        return isinstance(schema_value, (int, float)) and math.isclose(xml_value, schema_value, rel_tol=1e-6)
    return xml_value == schema_value
