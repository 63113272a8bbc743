"""Our node visitor inside executorch's QNN lowering, for the bound ops.

executorch builds one ``CustomOp`` visitor per op package info of the compile spec
(``node_visitor_manager.get_node_visitors``). While a ``bound_visitors`` block runs (our
partitioning or lowering), that class is swapped for a factory that hands bound ops to
``BoundOpVisitor`` -- which builds the ``PyQnnOpWrapper`` from a ``QnnOpSpec`` -- and leaves
any other custom op to executorch's own visitor; the original is restored afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import executorch.backends.qualcomm.python.PyQnnManagerAdaptor as PyQnnManager
import torch
from executorch.backends.qualcomm.builders import node_visitor_manager
from executorch.backends.qualcomm.builders.node_visitor import NodeVisitor
from executorch.backends.qualcomm.utils.constants import QCOM_DATA, QCOM_QUANT_ATTRS

from ..errors import ReportedError
from ..torch_bridge import OpBinding, OpPackageBinding, QnnOpSpec, output_carrier, qnn_op_spec

_EXECUTORCH_CUSTOM_OP = node_visitor_manager.CustomOp
_ACTIVE: dict[str, OpBinding] = {}  # custom op name ("ns.op.overload") -> binding, inside bound_visitors

NATIVE = PyQnnManager.Qnn_TensorType_t.QNN_TENSOR_TYPE_NATIVE


def qnn_datatype(name: str) -> Any:
    """``"QNN_DATATYPE_INT_32"`` -> ``PyQnnManager.Qnn_DataType_t.QNN_DATATYPE_INT_32``."""
    return getattr(PyQnnManager.Qnn_DataType_t, name)


class BoundOpVisitor(NodeVisitor):
    """Builds the QNN op of a bound torch op from its ``QnnOpSpec``; never skips a node."""

    def __init__(self, binding: OpBinding, *visitor_args: Any) -> None:
        super().__init__(*visitor_args)
        self.binding = binding
        self.target = [binding.custom_op_name]

    def define_node(
        self, node: torch.fx.Node, nodes_to_wrappers: dict[str, dict[int, Any]]
    ) -> PyQnnManager.PyQnnOpWrapper:
        spec = qnn_op_spec(self.binding, node)
        op = PyQnnManager.PyQnnOpWrapper(spec.name, spec.package_name, spec.type_name)
        inputs = [
            self.define_tensor(source, node, self.get_tensor(source, node), NATIVE, nodes_to_wrappers)
            for source in spec.inputs
        ]
        _add_params(op, spec)
        op.AddInputTensors(inputs)
        op.AddOutputTensors(self.define_outputs(node, spec, nodes_to_wrappers))
        return op

    def define_outputs(
        self, node: torch.fx.Node, spec: QnnOpSpec, nodes_to_wrappers: dict[str, dict[int, Any]]
    ) -> list[Any]:
        """One tensor per output, each with its own encoding.

        executorch's AnnotateQuantAttrs pass copies each ``getitem``'s quant attrs onto the
        op node, so the last output's encoding would be used for all of them; here output
        ``i`` is defined with the quant attrs of its own ``getitem``.
        """
        multi = len(spec.outputs) > 1 or isinstance(node.meta["val"], (tuple, list))
        if not multi:
            return [self.define_tensor(node, node, self.get_tensor(node, node), NATIVE, nodes_to_wrappers)]
        wrappers = []
        shared_attrs = node.meta.get(QCOM_QUANT_ATTRS)
        try:
            for out in spec.outputs:
                carrier = output_carrier(node, out.index, multi=True)
                own_attrs = carrier.meta.get(QCOM_QUANT_ATTRS) if carrier is not None else None
                _set_meta(node, QCOM_QUANT_ATTRS, own_attrs)
                wrappers.append(
                    self.define_tensor(
                        node,
                        node,
                        self.get_tensor(node, node, out.index),
                        NATIVE,
                        nodes_to_wrappers,
                        wrapper_idx=out.index,
                    )
                )
        finally:
            _set_meta(node, QCOM_QUANT_ATTRS, shared_attrs)
        return wrappers


def _set_meta(node: torch.fx.Node, key: str, value: Any) -> None:
    if value is None:
        node.meta.pop(key, None)
    else:
        node.meta[key] = value


def _add_params(op: PyQnnManager.PyQnnOpWrapper, spec: QnnOpSpec) -> None:
    for param in spec.params:
        if param.is_tensor:
            op.AddTensorParam(
                param.name, qnn_datatype(param.datatype), param.value.ndim, list(param.value.shape), param.value, True
            )
        else:
            op.AddScalarParam(param.name, qnn_datatype(param.datatype), {QCOM_DATA: param.value.item()})


def _visitor_for(op_package_info: Any, *visitor_args: Any) -> NodeVisitor:
    binding = _ACTIVE.get(op_package_info.custom_op_name)
    if binding is None:
        return _EXECUTORCH_CUSTOM_OP(op_package_info, *visitor_args)
    return BoundOpVisitor(binding, *visitor_args)


class BindingConflictError(ReportedError, ValueError):
    """One torch op bound to two different OpDefs in one lowering."""


@contextmanager
def bound_visitors(package_binding: OpPackageBinding) -> Iterator[None]:
    """Route executorch's custom-op visitors for the bound ops to ``BoundOpVisitor`` while the
    block runs -- wrap ``to_edge_transform_and_lower`` with ``QnnCustomOpPartitioner`` in it
    (``lower`` does) -- and put executorch's visitor back afterwards, whatever happens."""
    added = []
    for binding in package_binding.ops.values():
        active = _ACTIVE.get(binding.custom_op_name)
        if active is not None and (active.package_name, active.qnn_op_type) != (
            binding.package_name,
            binding.qnn_op_type,
        ):
            raise BindingConflictError(
                f"{binding.custom_op_name} is bound to {active.package_name}::{active.qnn_op_type} and to "
                f"{binding.package_name}::{binding.qnn_op_type} in one lowering (bind each torch op to one OpDef)"
            )
        if active is None:
            _ACTIVE[binding.custom_op_name] = binding
            added.append(binding.custom_op_name)
    previous = node_visitor_manager.CustomOp
    node_visitor_manager.CustomOp = _visitor_for
    try:
        yield
    finally:
        node_visitor_manager.CustomOp = previous
        for name in added:
            del _ACTIVE[name]
