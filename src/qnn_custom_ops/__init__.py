"""qnn-custom-ops: custom PyTorch operators on Qualcomm NPUs through ExecuTorch.

Reading and generating need only lxml and Jinja. Everything that needs torch or executorch
is imported on first use, so ``validate`` and ``generate`` start fast.
"""

from .lazy import lazy_getattr
from .opdef import Datatype, OpDef, OpDefError, OpDefWarning, OpPackage, TensorDef, load_package

__version__ = "0.1.0"

# Public name -> module that defines it (imported lazily: most pull in torch/executorch).
_LAZY = {
    "bind": "builder",
    "OpPackageBinding": "builder",
    "bound_visitors": "builder.visitor",
    "AlignmentError": "builder",
    "OpMappingError": "builder",
    "QnnOpSpec": "builder",
    "QnnParam": "builder",
    "opdef_from_torch": "builder.from_torch",
    "define_torch_ops": "builder.define",
    "register_out_variant": "builder.define",
    "compile_spec": "partitioner",
    "OpPackageBuild": "partitioner",
    "CompileSpecError": "partitioner",
    "PreflightError": "partitioner",
    "QnnCustomOpPartitioner": "partitioner",
    "QnnSdkMissingError": "qnn_sdk",
    "lower": "partitioner",
    "build_host_library": "runtime",
    "load_host_library": "runtime",
    "make_quantizer": "quantizer",
    "quant_annotation": "quantizer",
    "QuantAnnotationError": "quantizer",
    "Share": "quantizer",
    "quieted": "quiet",
}

__all__ = ["Datatype", "OpDef", "OpDefError", "OpDefWarning", "OpPackage", "TensorDef", "load_package", *_LAZY]

__getattr__ = lazy_getattr(__name__, _LAZY)
