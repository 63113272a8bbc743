"""torch schema <-> OpDef alignment, and fx.Node -> QnnOpSpec -> PyQnnOpWrapper."""

from ..qnn_sdk import guard_sdk_download

guard_sdk_download()  # before anything imports executorch's QNN code

from .alignment import AlignmentError, AlignmentProblem, ArgBinding, ArgKind, OpBinding, bind_ops  # noqa: E402
from .spec import OpMappingError, QnnOpSpec, QnnOutput, QnnParam, qnn_op_spec  # noqa: E402

__all__ = ["AlignmentError", "AlignmentProblem", "ArgBinding", "ArgKind", "OpBinding", "OpMappingError",
           "QnnOpSpec", "QnnOutput", "QnnParam", "bind_ops", "qnn_op_spec"]
