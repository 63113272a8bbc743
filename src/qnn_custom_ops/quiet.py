"""Third-party noise, filtered where it is known, so the demo and the CLI show the flow and
its results. ``verbose`` brings everything back; our own warnings are never filtered."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings
from typing import Iterator

# Lines the ExecuTorch runtime's C++ prints on the process's stderr while loading.
_NATIVE_NOISE = re.compile(r"^\[cpuinfo_utils\.cpp:\d+\]")


def quiet_third_party(verbose: bool = False) -> None:
    """Silence known third-party noise (call before importing torch); no-op when ``verbose``."""
    if verbose:
        return
    # torchao (its optional CUDA kernels), torch (pytree notices) and executorch (deprecations,
    # SDK notes) log setup chatter at WARNING and below, and executorch resets logger levels on
    # import: a process-wide threshold holds. qnn-custom-ops itself does not log.
    logging.disable(logging.WARNING)
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)


@contextlib.contextmanager
def native_noise_filtered(verbose: bool = False) -> Iterator[None]:
    """Drop the runtime's known C++ chatter from stderr inside the block; keep every other line."""
    if verbose:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().decode("utf-8", "replace").splitlines(keepends=True)
                    if not _NATIVE_NOISE.match(line)]
            sys.stderr.write("".join(kept))
