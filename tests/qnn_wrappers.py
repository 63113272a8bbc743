"""Build executorch's QNN op wrappers for an edge graph the way lowering does, and read them back.

Runs without the QNN SDK: only compiling and running need libQnnHtp.so.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import executorch.backends.qualcomm.python.PyQnnManagerAdaptor as PyQnnManager
from executorch.backends.qualcomm.builders.node_visitor_manager import get_node_visitors

SCALAR = PyQnnManager.Qnn_ParamType_t.QNN_PARAMTYPE_SCALAR


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
    scale_offset = quant.scaleOffsetEncoding if encoding.endswith("_SCALE_OFFSET") else None
    return TensorReadback(v2.name, [int(d) for d in v2.dimensions], v2.dataType.name, encoding,
                          float(scale_offset.scale) if scale_offset else 0.0,
                          int(scale_offset.offset) if scale_offset else 0)


def op_wrappers(edge_program, op_package_infos, nodes) -> list[OpReadback]:
    """The op wrappers executorch's visitors build for ``nodes``, read back field by field."""
    visitors = get_node_visitors(edge_program, op_package_infos=op_package_infos)
    wrappers = defaultdict(dict)
    readbacks = []
    for node in nodes:
        config = visitors[node.target.__name__].define_node(node, wrappers).GetOpWrapper().GetOpConfig()
        readbacks.append(OpReadback(
            name=config["name"], package=config["packageName"], type=config["typeName"],
            inputs=[_tensor(t) for t in config["inputTensors"]],
            outputs=[_tensor(t) for t in config["outputTensors"]],
            params=[(p.name, "scalar" if p.paramType == SCALAR else "tensor") for p in config["params"]],
        ))
    return readbacks
