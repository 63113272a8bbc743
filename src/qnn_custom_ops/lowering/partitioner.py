"""``QnnCustomOpPartitioner``: executorch's QnnPartitioner with our builder and a preflight."""

from __future__ import annotations

from typing import Any

import torch
from executorch.backends.qualcomm.partition.qnn_partitioner import QnnPartitioner
from executorch.backends.qualcomm.partition.utils import generate_qnn_executorch_option
from executorch.backends.qualcomm.serialization.qc_schema import QnnExecuTorchBackendType
from executorch.backends.qualcomm.serialization.qc_schema_serialize import flatbuffer_to_option
from executorch.exir.backend.partitioner import PartitionResult

from ..qnn_sdk import require_sdk
from ..torch_bridge import OpPackageBinding
from .op_builder import bound_visitors
from .preflight import PreflightError, preflight
from .shards import LayerShards, node_shards, split_partitions

_BACKENDS = {QnnExecuTorchBackendType.kHtpBackend: "HTP", QnnExecuTorchBackendType.kGpuBackend: "GPU"}


def spec_backend(compile_spec: list[Any]) -> str:
    """The QNN backend a compile spec targets, by OpDef name (HTP, GPU, ...)."""
    options = flatbuffer_to_option(generate_qnn_executorch_option(compile_spec))
    backend_type = options.backend_options.backend_type
    return _BACKENDS.get(backend_type, backend_type.name)


class QnnCustomOpPartitioner(QnnPartitioner):
    """Checks every custom op node before QNN sees the graph; then partitions as QnnPartitioner.

    Without the QNN SDK the real QNN partitioning cannot run; after the preflight passes it
    says so in one line (``QnnSdkMissingError``) instead of downloading or aborting.
    """

    def __init__(
        self, compile_spec: list[Any], binding: OpPackageBinding, shards: LayerShards | None = None, **kwargs: Any
    ) -> None:
        super().__init__(compile_spec, **kwargs)
        self.binding = binding
        self.backend = spec_backend(compile_spec)
        self.shards = shards

    def generate_partitions(self, edge_program: torch.export.ExportedProgram) -> list[Any]:
        """QnnPartitioner's partitions, cut into ``shards`` of layers (``shards.split_partitions``)."""
        partitions = super().generate_partitions(edge_program)
        if self.shards is None or self.shards.count == 1:
            return partitions
        return split_partitions(partitions, node_shards(edge_program.graph, self.shards.of_layer))

    def preflight(self, graph_module: torch.fx.GraphModule) -> None:
        """Raise ``PreflightError`` with every problem of the graph's custom op nodes."""
        problems = preflight(graph_module, self.binding, self.backend)
        if problems:
            raise PreflightError(problems)

    def partition(self, edge_program: torch.export.ExportedProgram) -> PartitionResult:
        self.preflight(edge_program.graph_module)
        require_sdk("QNN partitioning (QnnCustomOpPartitioner)")
        with bound_visitors(self.binding):
            return super().partition(edge_program)
