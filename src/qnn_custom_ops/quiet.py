"""Third-party noise, filtered where it is known, so scripts, the demo and the CLI show the
flow and its results. ``verbose`` brings everything back; our own warnings are never filtered.

``quieted()`` is the public, opt-in form (``qco.quieted()``): a block that is quiet and leaves
logging and warnings as it found them. The CLI, a process of its own, silences its whole run."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

# Lines the ExecuTorch runtime's C++ prints on the process's stderr while loading.
# The runtime's cpuinfo notes; ExecuTorch's QNN adaptor's INFO and WARNING lines (backend set-up
# and tear-down, its API version note) and the one harmless ERROR of QAIRT 2.51 ("unexpected
# GraphHtpSettings option 66", for every graph), with the blank line that follows it.
_NATIVE_NOISE = re.compile(
    r"^\[cpuinfo_utils\.cpp:\d+\]|^\[(INFO|WARNING)\] \[Qnn ExecuTorch\]|"
    r"^\[ERROR\] \[Qnn ExecuTorch\]:\s+<E> unexpected GraphHtpSettings option 66|^\s*$"
)

# torchao, torch and executorch warn of their own deprecations with these; qnn-custom-ops warns
# with UserWarning subclasses (OpDefWarning, SwapWarning, ...), which are never filtered.
_NOISY_WARNINGS = (FutureWarning, DeprecationWarning)


def quiet_third_party(verbose: bool = False) -> None:
    """Silence known third-party noise (call before importing torch); no-op when ``verbose``."""
    if verbose:
        return
    # torchao (its optional CUDA kernels), torch (pytree notices) and executorch (deprecations,
    # SDK notes) log setup chatter at WARNING and below, and executorch resets logger levels on
    # import: a process-wide threshold holds. qnn-custom-ops itself does not log.
    logging.disable(logging.WARNING)
    for category in _NOISY_WARNINGS:
        warnings.filterwarnings("ignore", category=category)


def _writes_to_fd_2(stream: Any) -> bool:
    """Whether ``stream`` is the process's real stderr (not a ``redirect_stderr`` target)."""
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return False


@contextlib.contextmanager
def native_stderr_held(python_live: bool = False) -> Iterator[list[str]]:
    """Hold what is written to file descriptor 2 inside the block (native code's logs, and
    Python's own stderr when it is the real one, unless ``python_live``: then Python's lines,
    such as progress, reach the real stderr as they are written); the list holds the held lines
    once the block ends, raised or not, for the caller to replay, filter or report."""
    sys.stderr.flush()
    saved = os.dup(2)
    lines: list[str] = []
    python_stderr = sys.stderr
    live = python_live and _writes_to_fd_2(python_stderr)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        if live:
            encoding = python_stderr.encoding
            sys.stderr = open(os.dup(saved), "w", buffering=1, encoding=encoding, errors="backslashreplace")
        try:
            yield lines
        finally:
            if live:
                sys.stderr.close()
                sys.stderr = python_stderr
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines += capture.read().decode("utf-8", "replace").splitlines(keepends=True)


@contextlib.contextmanager
def native_noise_filtered(verbose: bool = False) -> Iterator[None]:
    """Drop the runtime's known C++ chatter from stderr inside the block; keep every other line.
    Python's own lines (progress, our warnings) are not held: a long export says how far it is
    while it runs, not when it ends."""
    if verbose:
        yield
        return
    lines: list[str] = []
    try:
        with native_stderr_held(python_live=True) as lines:
            yield
    finally:
        sys.stderr.write("".join(line for line in lines if not _NATIVE_NOISE.match(line)))


#: What QAIRT's x86 HTP backend prints on stdout when it starts (libnative's thread-local config).
_NATIVE_STDOUT_NOISE = re.compile(r"^\s*# LIBNATIVE: ")


def native_stdout_filtered(text: str, verbose: bool = False) -> str:
    """``text`` (a child's stdout) without the QNN backend's start-up line, unless ``verbose``."""
    if verbose:
        return text
    return "".join(line for line in text.splitlines(keepends=True) if not _NATIVE_STDOUT_NOISE.match(line))


@contextlib.contextmanager
def quieted() -> Iterator[None]:
    """Silence known third-party noise inside the block, then put back the logging threshold and
    the warning display it changed, so a script opts in without changing the rest of its process.

    Warnings are dropped where they are shown, not by filters: the filters torch and executorch
    install while they are imported inside the block stay. Enter it before torchao and executorch
    are first imported (their imports print most of the noise); other stderr lines written inside
    the block appear when it ends.
    """
    disabled, show = logging.root.manager.disable, warnings.showwarning

    def show_unless_noise(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if not issubclass(category, _NOISY_WARNINGS):
            show(message, category, *args, **kwargs)

    logging.disable(logging.WARNING)  # the threshold quiet_third_party sets, for the block only
    warnings.showwarning = show_unless_noise
    try:
        with native_noise_filtered():
            yield
    finally:
        logging.disable(disabled)
        warnings.showwarning = show
