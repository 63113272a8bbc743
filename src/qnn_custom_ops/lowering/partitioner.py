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

    def __init__(self, compile_spec: list[Any], binding: OpPackageBinding, **kwargs: Any) -> None:
        super().__init__(compile_spec, **kwargs)
        self.binding = binding
        self.backend = spec_backend(compile_spec)

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
