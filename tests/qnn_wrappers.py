"""Build executorch's QNN op wrappers for an edge graph the way lowering does, and read them back.

Runs without the QNN SDK: only compiling and running need libQnnHtp.so.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import executorch.backends.qualcomm.python.PyQnnManagerAdaptor as PyQnnManager
import torch
from executorch.backends.qualcomm._passes.qnn_pass_manager import get_qnn_pass_manager_cls
from executorch.backends.qualcomm.builders.node_visitor_manager import get_node_visitors
from executorch.backends.qualcomm.qnn_preprocess import QnnBackend
from executorch.backends.qualcomm.serialization.qc_schema import QnnExecuTorchBackendType
from executorch.backends.qualcomm.utils.utils import qnn_edge_config
from executorch.exir import to_edge_transform_and_lower

from qnn_custom_ops.lowering.op_builder import bound_visitors

SCALAR = PyQnnManager.Qnn_ParamType_t.QNN_PARAMTYPE_SCALAR
HTP = QnnExecuTorchBackendType.kHtpBackend


@dataclass(frozen=True)
class TensorReadback:
    name: str
    dims: list[int]
    datatype: str
    encoding: str
    scale: float
    offset: int


@dataclass(frozen=True)
class OpReadback:
    name: str
    package: str
    type: str
    inputs: list[TensorReadback]
    outputs: list[TensorReadback]
    params: list[tuple[str, str]]  # (name, "scalar" | "tensor")


def _tensor(tensor) -> TensorReadback:
    v2 = tensor.v2
    quant = v2.quantizeParams
    encoding = quant.quantizationEncoding.name
    scale_offset = quant.scaleOffsetEncoding if encoding == "QNN_QUANTIZATION_ENCODING_SCALE_OFFSET" else None
    return TensorReadback(v2.name, [int(d) for d in v2.dimensions], v2.dataType.name, encoding,
                          float(scale_offset.scale) if scale_offset else 0.0,
                          int(scale_offset.offset) if scale_offset else 0)


def readback(py_op_wrapper) -> OpReadback:
    """A PyQnnOpWrapper's op config as plain data."""
    config = py_op_wrapper.GetOpWrapper().GetOpConfig()
    return OpReadback(
        name=config["name"], package=config["packageName"], type=config["typeName"],
        inputs=[_tensor(t) for t in config["inputTensors"]],
        outputs=[_tensor(t) for t in config["outputTensors"]],
        params=[(p.name, "scalar" if p.paramType == SCALAR else "tensor") for p in config["params"]],
    )


def op_wrappers(edge_program, op_package_infos, nodes, binding) -> list[OpReadback]:
    """The op wrappers executorch's visitors build for ``nodes`` during a lowering with
    ``binding``, read back field by field."""
    with bound_visitors(binding):
        visitors = get_node_visitors(edge_program, op_package_infos=op_package_infos)
        wrappers = defaultdict(dict)
        return [readback(visitors[node.target.__name__].define_node(node, wrappers)) for node in nodes]


def qnn_edge_program(module, example_inputs):
    """The edge program as QNN lowering prepares it (QNN export and edge passes, QNN edge config)."""
    pass_manager = get_qnn_pass_manager_cls(HTP)()
    exported = torch.export.export(module, example_inputs, strict=True)
    aten = pass_manager.transform_for_export_pipeline(exported)
    passes = pass_manager.get_to_edge_transform_passes(exported)
    return to_edge_transform_and_lower(aten, transform_passes=passes, compile_config=qnn_edge_config()).exported_program()


def all_op_wrappers(edge_program, op_package_infos, binding=None) -> list[OpReadback]:
    """Every op wrapper of the graph, built by QnnBackend exactly as before Compile: during a
    lowering with ``binding``, or with executorch's own visitors when it is None."""
    with bound_visitors(binding) if binding is not None else nullcontext():
        return [readback(w) for w in QnnBackend._build_op_wrappers(edge_program, False, op_package_infos, False,
                                                                   HTP)]


def fake_op_package_library(directory: Path, package: str, name: str = "libQnnFake.so") -> Path:
    """Test double of a built op package library (the real one needs the QNN SDK to compile):
    a shared library exporting ``<package>InterfaceProvider`` and nothing else."""
    source = directory / f"{name}.cpp"
    source.write_text(f'extern "C" int {package}InterfaceProvider(void*) {{ return 0; }}\n')
    library = directory / name
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library
