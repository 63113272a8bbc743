"""``OpPackageBinding``: an op package bound to torch ops -- the handle every later step takes.

``bind`` checks the schemas once; the binding is then plain data (the package and its
``OpBinding``s) that maps graph nodes to their ops and to ``QnnOpSpec``s. The quantizer
(``quant_annotation``, ``make_quantizer``) and the lowering (``compile_spec``,
``lower``) take a binding; the binding knows neither.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch

from ..opdef import OpPackage
from .alignment import OpBinding, bind_ops, target_op_name
from .define import has_out_variant
from .op_name import OperatorName
from .spec import OpMappingError, QnnOpSpec, qnn_op_spec


@dataclass(frozen=True)
class OpPackageBinding:
    package: OpPackage
    ops: Mapping[str, OpBinding]  # by QNN op type, in mapping order

    @property
    def by_custom_op_name(self) -> Mapping[str, OpBinding]:
        return MappingProxyType({b.custom_op_name: b for b in self.ops.values()})

    @property
    def namespaces(self) -> frozenset[str]:
        """The torch namespaces of the bound ops: where an unbound op is a mistake."""
        return frozenset(b.overload.namespace for b in self.ops.values())

    def op_for(self, node: torch.fx.Node) -> OpBinding | None:
        """The binding of a node's op, or None if the node is not a bound op."""
        if node.op != "call_function":
            return None
        return self.by_custom_op_name.get(target_op_name(node.target) or "")

    def qnn_op_spec(self, node: torch.fx.Node) -> QnnOpSpec:
        """What QNN receives for ``node`` (an fx.Node of a bound op, exported or edge graph)."""
        binding = self.op_for(node)
        if binding is None:
            bound = ", ".join(self.by_custom_op_name)
            raise OpMappingError(f"node {node.name} ({node.target}) is not a bound op (bound: {bound})")
        return qnn_op_spec(binding, node)


def bind(package: OpPackage, mapping: Mapping[str, Any]) -> OpPackageBinding:
    """Bind QNN op types of ``package`` to torch overloads: ``{"ExampleCustomOp": torch.ops.my_ops.mul3.default}``.

    Raises ``AlignmentError`` listing every mismatch of every pair. Changes nothing outside
    the returned binding: executorch's QNN visitors are routed to the bound ops only while a
    lowering with this binding runs.
    """
    ops = bind_ops(package, mapping)
    for op in ops.values():
        if not has_out_variant(op.overload):
            name = OperatorName.of(op.overload)
            warnings.warn(
                MissingOutVariantWarning(
                    f"{name.qualified} has no .out overload, which the host target (to_executorch) needs: "
                    f"qnn_custom_ops.register_out_variant({name.python})"
                ),
                stacklevel=2,
            )
    return OpPackageBinding(package, MappingProxyType(ops))


class MissingOutVariantWarning(UserWarning):
    """A bound op without the ``.out`` overload: fine for QNN, needed on the host."""
