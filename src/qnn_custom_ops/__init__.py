"""qnn-custom-ops: custom PyTorch operators on Qualcomm NPUs through ExecuTorch.

Reading and generating need only lxml and Jinja. Everything that needs torch or executorch
is imported on first use, so ``validate`` and ``generate`` start fast.
"""

from .lazy import lazy_getattr
from .opdef import Datatype, OpDef, OpDefError, OpDefWarning, OpPackage, TensorDef, load_package

__version__ = "0.1.0"

# Public name -> module that defines it (imported lazily: most pull in torch/executorch).
_LAZY = {
    "bind": "torch_bridge",
    "OpPackageBinding": "torch_bridge",
    "bound_visitors": "lowering.op_builder",
    "AlignmentError": "torch_bridge",
    "OpMappingError": "torch_bridge",
    "QnnOpSpec": "torch_bridge",
    "QnnParam": "torch_bridge",
    "Encoding": "torch_bridge.quantized",
    "opdef_from_torch": "torch_bridge.from_torch",
    "define_torch_ops": "torch_bridge.define",
    "register_out_variant": "torch_bridge.define",
    "register_backward": "torch_bridge.autograd",
    "BackwardError": "torch_bridge.autograd",
    "compile_spec": "lowering",
    "OpPackageBuild": "lowering",
    "CompileSpecError": "lowering",
    "PreflightError": "lowering",
    "QnnCustomOpPartitioner": "lowering",
    "QnnSdkMissingError": "qnn_sdk",
    "lower": "lowering",
    "build_host_library": "runtime",
    "compare_outputs": "runtime",
    "Tolerance": "runtime",
    "load_host_library": "runtime",
    "load_program_libraries": "runtime",
    "make_quantizer": "quantizer",
    "quant_annotation": "quantizer",
    "io_quant_configs": "quantizer",
    "QuantAnnotationError": "quantizer",
    "Share": "quantizer",
    "quieted": "quiet",
}

__all__ = ["Datatype", "OpDef", "OpDefError", "OpDefWarning", "OpPackage", "TensorDef", "load_package", *_LAZY]

__getattr__ = lazy_getattr(__name__, _LAZY)
