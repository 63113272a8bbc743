"""torch schema <-> OpDef alignment, and fx.Node -> QnnOpSpec -> PyQnnOpWrapper."""

from ..qnn_sdk import guard_sdk_download

guard_sdk_download()  # before anything imports executorch's QNN code

from .alignment import (  # noqa: E402
    AlignmentError,
    AlignmentProblem,
    ArgBinding,
    ArgKind,
    OpBinding,
    bind_ops,
    target_op_name,
)
from .binding import OpPackageBinding, bind  # noqa: E402
from .spec import OpMappingError, QnnOpSpec, QnnOutput, QnnParam, node_arguments, output_carrier, qnn_op_spec  # noqa: E402

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
