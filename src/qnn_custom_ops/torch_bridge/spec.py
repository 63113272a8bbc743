"""fx.Node of a bound op -> ``QnnOpSpec``: exactly what QNN will receive for it.

Datatypes come from the OpDef, never from the Python type of a value: a negative int is
INT_32 when the XML says so, a bool is BOOL_8, a list is a tensor param of the declared
element type, a str is the index of its Enum. A node that cannot be mapped raises
``OpMappingError`` naming the node; nothing is skipped.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import ReportedError
from ..opdef import HTP, Datatype, TensorDef
from ..opdef.datatypes import DATATYPES
from .alignment import ArgBinding, ArgKind, OpBinding

# QNN datatype -> numpy scalar type of a param value, for every datatype a param can have.
NUMPY_DTYPE: dict[Datatype, type] = {
    r.datatype: np.dtype(r.numpy).type
    for r in DATATYPES.values()
    if r.numpy is not None and not r.datatype.is_fixed_point
}


class OpMappingError(ReportedError, ValueError):
    """A node of a bound op whose arguments QNN cannot receive as the OpDef declares."""


@dataclass(frozen=True)
class QnnParam:
    name: str
    datatype: str  # e.g. "QNN_DATATYPE_INT_32"
    value: np.generic | np.ndarray  # of exactly that datatype's dtype

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.value, np.ndarray)


@dataclass(frozen=True)
class QnnOutput:
    index: int
    name: str  # the OpDef output name
    dtype: torch.dtype
    shape: tuple[int, ...]


@dataclass(frozen=True)
class QnnOpSpec:
    name: str  # the node name: the QNN node name
    package_name: str
    type_name: str
    inputs: tuple[torch.fx.Node, ...]  # XML order; omitted trailing optional inputs are absent
    params: tuple[QnnParam, ...]  # XML order; None-valued optional params are absent
    outputs: tuple[QnnOutput, ...]


def node_arguments(binding: OpBinding, node: torch.fx.Node) -> list[Any]:
    """The value of every schema argument: positional, keyword, or the schema default."""
    values = []
    for index, arg in enumerate(binding.overload._schema.arguments):
        if index < len(node.args):
            values.append(node.args[index])
        elif arg.name in node.kwargs:
            values.append(node.kwargs[arg.name])
        elif arg.has_default_value():
            values.append(arg.default_value)
        else:
            raise OpMappingError(
                f"node {node.name} ({binding.custom_op_name}): argument '{arg.name}' is missing and has no default"
            )
    extra = len(node.args) - len(values)
    if extra > 0:
        raise OpMappingError(
            f"node {node.name} ({binding.custom_op_name}): {extra} positional argument(s) more than the schema has"
        )
    return values


def qnn_op_spec(binding: OpBinding, node: torch.fx.Node) -> QnnOpSpec:
    values = node_arguments(binding, node)
    where = f"node {node.name} ({binding.custom_op_name} -> {binding.package_name}::{binding.qnn_op_type})"
    return QnnOpSpec(
        name=node.name,
        package_name=binding.package_name,
        type_name=binding.qnn_op_type,
        inputs=_inputs(binding, values, where),
        params=tuple(
            p for p in (_param(b, values[b.schema_index], binding, where) for b in binding.params) if p is not None
        ),
        outputs=_outputs(binding, node, where),
    )


def _inputs(binding: OpBinding, values: list[Any], where: str) -> tuple[torch.fx.Node, ...]:
    """Input nodes in XML order. QNN inputs are positional, so only trailing ones may be omitted."""
    inputs: list[torch.fx.Node] = []
    omitted: ArgBinding | None = None
    for arg in binding.inputs:
        value = values[arg.schema_index]
        if value is None:
            if arg.tensor.mandatory:
                raise OpMappingError(f"{where}: input '{arg.tensor.name}' is None but the OpDef makes it mandatory")
            omitted = omitted or arg
            continue
        if not isinstance(value, torch.fx.Node):
            raise OpMappingError(f"{where}: input '{arg.tensor.name}' is {value!r}, not a tensor of the graph")
        if omitted is not None:
            raise OpMappingError(
                f"{where}: input '{omitted.tensor.name}' is None but a later input "
                f"'{arg.tensor.name}' is given; QNN inputs are positional, so only trailing "
                "optional inputs can be left out (pass a tensor, or reorder the inputs)"
            )
        inputs.append(value)
    return tuple(inputs)


def _param(arg: ArgBinding, value: Any, binding: OpBinding, where: str) -> QnnParam | None:
    tensor = arg.tensor
    if value is None:
        if tensor.mandatory:
            raise OpMappingError(f"{where}: param '{tensor.name}' is None but the OpDef makes it mandatory")
        return None
    if isinstance(value, torch.fx.Node):
        raise OpMappingError(
            f"{where}: param '{tensor.name}' is computed in the graph ({value.name}); "
            "QNN params must be constants at export time"
        )
    datatypes = binding.opdef.datatypes(tensor, HTP)
    if arg.kind is ArgKind.STR:
        return _enum_param(tensor, value, datatypes, where)
    if arg.kind in (ArgKind.INT_LIST, ArgKind.FLOAT_LIST):
        items = list(value)
        if not items:
            raise OpMappingError(
                f"{where}: param '{tensor.name}' is an empty list; a QNN tensor param needs at least one element"
            )
        datatype = _fitting_datatype(tensor, items, datatypes, where)
        return QnnParam(tensor.name, datatype.value, np.asarray(items, dtype=NUMPY_DTYPE[datatype]))
    datatype = _fitting_datatype(tensor, [value], datatypes, where)
    return QnnParam(tensor.name, datatype.value, NUMPY_DTYPE[datatype](value))


def _enum_param(tensor: TensorDef, value: Any, datatypes: tuple[Datatype, ...], where: str) -> QnnParam:
    if value not in tensor.enum_values:
        raise OpMappingError(
            f"{where}: param '{tensor.name}' is {value!r}, not one of its enum values {', '.join(tensor.enum_values)}"
        )
    index = tensor.enum_values.index(value)
    datatype = _fitting_datatype(tensor, [index], datatypes, where)
    return QnnParam(tensor.name, datatype.value, NUMPY_DTYPE[datatype](index))


def _fitting_datatype(tensor: TensorDef, values: list[Any], datatypes: tuple[Datatype, ...], where: str) -> Datatype:
    """The first declared datatype that holds every value exactly."""
    for datatype in datatypes:
        if datatype in NUMPY_DTYPE and all(_fits(v, datatype) for v in values):
            return datatype
    shown = values[0] if len(values) == 1 else values
    raise OpMappingError(
        f"{where}: param '{tensor.name}' = {shown!r} fits none of its datatypes "
        f"{', '.join(d.short_name for d in datatypes)} (widen the <Datatype> or change the value)"
    )


def _fits(value: Any, datatype: Datatype) -> bool:
    if datatype == Datatype.BOOL_8:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if datatype.is_integer:
        info = np.iinfo(NUMPY_DTYPE[datatype])
        return isinstance(value, int) and info.min <= value <= info.max
    if datatype.is_float:
        return isinstance(value, (int, float)) and _fits_float(value, float(np.finfo(NUMPY_DTYPE[datatype]).max))
    return False


def _fits_float(value: int | float, largest: float) -> bool:
    """In Python floats: a numpy comparison would cast ``value`` to float32 first and warn on overflow."""
    try:
        magnitude = abs(float(value))
    except OverflowError:  # an int beyond any float
        return False
    return math.isnan(magnitude) or math.isinf(magnitude) or magnitude <= largest


def _outputs(binding: OpBinding, node: torch.fx.Node, where: str) -> tuple[QnnOutput, ...]:
    value = node.meta.get("val")
    values = value if isinstance(value, (tuple, list)) else (value,)
    if value is None or len(values) != len(binding.opdef.outputs):
        raise OpMappingError(
            f"{where}: the node carries {0 if value is None else len(values)} output value(s) "
            f"in meta['val'], the OpDef declares {len(binding.opdef.outputs)} (export the model "
            "with torch.export so outputs are known)"
        )
    return tuple(
        QnnOutput(i, out.name, v.dtype, tuple(int(d) for d in v.shape))
        for i, (out, v) in enumerate(zip(binding.opdef.outputs, values))
    )


def output_carrier(node: torch.fx.Node, index: int, multi: bool) -> torch.fx.Node | None:
    """The node that carries output ``index``: the node itself, or its ``getitem`` user."""
    if not multi:
        return node
    return next((u for u in node.users if u.target is operator.getitem and u.args[1] == index), None)
