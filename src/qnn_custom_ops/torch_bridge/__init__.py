"""The torch bridge: torch schema <-> OpDef alignment (``bind``), torch ops defined from an
OpDef and OpDefs from torch ops, and fx.Node -> ``QnnOpSpec`` (plain data; the lowering's
custom op builder turns it into a QNN node). Imports nothing of executorch's QNN backend."""

from .alignment import (
    AlignmentError,
    AlignmentProblem,
    ArgBinding,
    ArgKind,
    OpBinding,
    bind_ops,
    target_op_name,
)
from .binding import OpPackageBinding, bind
from .spec import OpMappingError, QnnOpSpec, QnnOutput, QnnParam, node_arguments, output_carrier, qnn_op_spec

__all__ = [
    "AlignmentError",
    "AlignmentProblem",
    "ArgBinding",
    "ArgKind",
    "OpBinding",
    "OpMappingError",
    "OpPackageBinding",
    "QnnOpSpec",
    "bind",
    "QnnOutput",
    "QnnParam",
    "bind_ops",
    "node_arguments",
    "output_carrier",
    "qnn_op_spec",
    "target_op_name",
]
