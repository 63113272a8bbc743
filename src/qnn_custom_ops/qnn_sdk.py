"""Where the QNN SDK is, and the guard that keeps executorch from downloading it.

executorch's QNN helpers download the SDK when ``QNN_SDK_ROOT`` is unset; an empty value
tells them the caller is in charge. Every module of ours that touches executorch's QNN
code calls ``guard_sdk_download()`` first, so nothing of ours ever reaches the network.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ReportedError

HOST_LIBRARY_DIR = "lib/x86_64-linux-clang"
REQUIRED_HOST_LIBRARY = "libQnnHtp.so"


class QnnSdkMissingError(ReportedError, RuntimeError):
    """A step that needs the proprietary QNN SDK, asked for on a machine without it."""


def guard_sdk_download() -> None:
    """Set ``QNN_SDK_ROOT`` to empty when unset, so executorch never tries to download it."""
    os.environ.setdefault("QNN_SDK_ROOT", "")


def sdk_root() -> Path | None:
    """The QNN SDK root if ``QNN_SDK_ROOT`` names one with the HTP host library, else None."""
    root = os.environ.get("QNN_SDK_ROOT", "")
    if root and (Path(root) / HOST_LIBRARY_DIR / REQUIRED_HOST_LIBRARY).is_file():
        return Path(root)
    return None


def require_sdk(step: str) -> Path:
    """The SDK root, or one line saying what is missing and what works without it."""
    root = sdk_root()
    if root is None:
        raise QnnSdkMissingError(
            f"{step} needs the QNN SDK: {REQUIRED_HOST_LIBRARY} not found under "
            f"QNN_SDK_ROOT/{HOST_LIBRARY_DIR} ({_describe_root()}); set QNN_SDK_ROOT to your "
            "QNN SDK, or use the host target, which needs no SDK"
        )
    return root


def _describe_root() -> str:
    """What QNN_SDK_ROOT is, truthfully: unset, set but empty, or the path it names."""
    if "QNN_SDK_ROOT" not in os.environ:
        return "QNN_SDK_ROOT is unset"
    root = os.environ["QNN_SDK_ROOT"]
    return f"QNN_SDK_ROOT is {root}" if root else "QNN_SDK_ROOT is set but empty"
