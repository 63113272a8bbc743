"""OpDef XML: read, validate, and model QNN op package configs. Imports nothing of ours."""

from .diagnostics import Diagnostic, OpDefError, OpDefWarning
from .model import HTP, Datatype, Default, Layout, OpDef, OpPackage, Role, Shape, Supplement, TensorDef
from .parser import load_package, parse_package

__all__ = [
    "HTP",
    "Datatype",
    "Default",
    "Diagnostic",
    "Layout",
    "OpDef",
    "OpDefError",
    "OpDefWarning",
    "OpPackage",
    "Role",
    "Shape",
    "Supplement",
    "TensorDef",
    "load_package",
    "parse_package",
]
