"""``OpPackageBinding``: an op package bound to torch ops -- the handle every later step takes.

``bind`` checks the schemas once (``builder``); the binding then hands out QNN op specs
(``builder``), compile-spec op package options (``partitioner``) and quantizer
annotations (``quantizer``). This module only composes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import torch

from .builder import OpBinding, OpMappingError, QnnOpSpec, bind_ops, qnn_op_spec, target_op_name
from .builder.visitor import install
from .opdef import OpPackage


@dataclass(frozen=True)
class OpPackageBinding:
    package: OpPackage
    ops: Mapping[str, OpBinding]  # by QNN op type, in mapping order

    @property
    def by_custom_op_name(self) -> Mapping[str, OpBinding]:
        return MappingProxyType({b.custom_op_name: b for b in self.ops.values()})

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

    def op_package_options(self, builds: Iterable[Any]) -> Any:
        """``QnnExecuTorchOpPackageOptions`` for the compile spec; see ``partitioner.OpPackageBuild``."""
        from .partitioner.compile_spec import op_package_options

        return op_package_options(self, builds)

    def quant_annotation(self, quant_dtype: str = "8a8w", overrides: Any = None) -> Any:
        """``(GraphModule) -> None`` for ``QnnQuantizer.add_custom_quant_annotations``; see ``quantizer``."""
        from .quantizer import make_annotation

        return make_annotation(self.ops, quant_dtype, overrides)


def bind(package: OpPackage, mapping: Mapping[str, Any]) -> OpPackageBinding:
    """Bind QNN op types of ``package`` to torch overloads: ``{"ExampleCustomOp": torch.ops.my_ops.mul3.default}``.

    Raises ``AlignmentError`` listing every mismatch of every pair.
    """
    ops = bind_ops(package, mapping)
    install(ops)
    return OpPackageBinding(package, MappingProxyType(ops))
