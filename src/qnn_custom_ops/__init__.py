"""qnn-custom-ops: custom PyTorch operators on Qualcomm NPUs through ExecuTorch.

Reading and generating need only lxml and Jinja; nothing here imports torch at import time,
so the CLI's ``validate`` and ``generate`` start fast.
"""

from .opdef import Datatype, OpDef, OpDefError, OpDefWarning, OpPackage, TensorDef, load_package

__all__ = ["Datatype", "OpDef", "OpDefError", "OpDefWarning", "OpPackage", "TensorDef", "load_package"]
__version__ = "0.1.0"
