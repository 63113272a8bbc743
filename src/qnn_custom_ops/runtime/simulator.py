"""Run a QNN-delegated ``.pte`` on QAIRT's x86 HTP simulator with ExecuTorch's own runtime.

ExecuTorch's wheel carries its QNN runtime backend; with the SDK root of ``simulator_sdk`` (our
shim over QAIRT's real x86 backend) it executes the context binaries ``QnnPartitioner`` wrote.
The program runs in a child process started with that environment (the loader reads
``LD_LIBRARY_PATH`` only at start). A ``SimulatorSession`` keeps that child and the program's
methods loaded from call to call, as an LLM's generation needs; the child ends without running
the backend's static destructors (they crash at exit in these releases: "free(): invalid size").

    python -m qnn_custom_ops.runtime.simulator MODEL.pte REQUEST_FD REPLY_FD   # the child
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import torch

from ..errors import ReportedError
from ..progress import Progress, silent
from .simulator_sdk import SIMULATOR_QAIRT, simulator_environment

Inference = Sequence[torch.Tensor]
_LENGTH = struct.Struct("<Q")
#: How the shim's own lines begin (``qnn_shim/htp_shim.c``).
SHIM_SAYS = "qnn-custom-ops QNN shim: "


class SimulatorRunError(ReportedError, RuntimeError):
    """The program could not be loaded or run on the simulator."""


def _send(stream: IO[bytes], message: Any) -> None:
    """One message (tensors, strings, lists of them) after its length."""
    buffer = io.BytesIO()
    torch.save(message, buffer)
    stream.write(_LENGTH.pack(buffer.tell()) + buffer.getvalue())
    stream.flush()


def _receive(stream: IO[bytes]) -> Any | None:
    """The next message, or None when the other end has closed."""
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(header)
    body = stream.read(length)
    if len(body) < length:
        return None
    return torch.load(io.BytesIO(body), weights_only=True)


class SimulatorSession:
    """A program loaded once by ExecuTorch's runtime on QAIRT ``version``'s x86 HTP simulator, in
    a child process; ``run`` calls one of its methods. Close it (or use ``with``) to end the child.
    ``progress`` hears the backend's install, the first time."""

    def __init__(self, pte: bytes, version: str = SIMULATOR_QAIRT, progress: Progress = silent):
        self.version = version
        environment = {**os.environ, **simulator_environment(version, progress)}
        self._work = tempfile.TemporaryDirectory(prefix="qco-simulator-")
        work = Path(self._work.name)
        (work / "model.pte").write_bytes(pte)
        self._log = open(work / "child.log", "w+b")
        request_in, request_out = os.pipe()
        reply_in, reply_out = os.pipe()
        command = [sys.executable, "-m", __name__, str(work / "model.pte"), str(request_in), str(reply_out)]
        self._process = subprocess.Popen(command, pass_fds=(request_in, reply_out), stdin=subprocess.DEVNULL,
                                         stdout=self._log, stderr=subprocess.STDOUT, env=environment)  # fmt: skip
        os.close(request_in)
        os.close(reply_out)
        self._requests = os.fdopen(request_out, "wb")
        self._replies = os.fdopen(reply_in, "rb")

    def run(self, method: str, inputs: Inference) -> list[torch.Tensor]:
        """``method``'s outputs on ``inputs``."""
        try:
            _send(self._requests, (method, list(inputs)))
            reply = _receive(self._replies)
        except BrokenPipeError:
            reply = None
        if reply is None:
            self._process.wait()
            self._log.seek(0)
            raise SimulatorRunError(self._failed(_reason(self._log.read().decode(errors="replace"))))
        done, value = reply
        if not done:
            raise SimulatorRunError(self._failed(value))
        return value

    def _failed(self, reason: str) -> str:
        return f"the program did not run on QAIRT {self.version}'s HTP simulator: {reason}"

    def close(self) -> None:
        """End the child (it exits when its requests end) and remove its files."""
        self._requests.close()
        self._process.wait()
        self._replies.close()
        self._log.close()
        self._work.cleanup()

    def __enter__(self) -> SimulatorSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class SimulatorRunner:
    """``HostRunner``'s ``run`` on the simulator: one session per program run (``progress`` hears
    the backend's install, the first time)."""

    def __init__(self, version: str = SIMULATOR_QAIRT, progress: Progress = silent):
        self.version = version
        self.progress = progress

    def run(self, pte: bytes, inferences: Sequence[Inference], method: str = "forward") -> list[list[torch.Tensor]]:
        with SimulatorSession(pte, self.version, self.progress) as session:
            return [session.run(method, inference) for inference in inferences]


def _reason(log: str) -> str:
    """Why the child ended: the shim's own line (the backend could not be loaded), or the
    backend's last errors."""
    lines = log.splitlines()
    said = [line.removeprefix(SHIM_SAYS) for line in lines if line.startswith(SHIM_SAYS)]
    if said:
        return said[-1]
    errors = [line.strip() for line in lines if "ERROR" in line or "error" in line]
    return " | ".join(errors[-3:]) or "it ended without a word"


def _serve(pte: Path, requests: IO[bytes], replies: IO[bytes]) -> None:
    """The child: each request ``(method, inputs)`` answered ``(True, outputs)`` or ``(False, why)``."""
    from executorch.runtime import Runtime

    program = None
    methods: dict[str, Any] = {}
    while (request := _receive(requests)) is not None:
        method, inputs = request
        reply: tuple[bool, Any]
        try:
            program = program or Runtime.get().load_program(pte)
            if method not in methods:
                methods[method] = program.load_method(method)
            reply = (True, [t.clone() for t in methods[method].execute(inputs)])
        except (RuntimeError, ValueError) as error:
            reply = (False, str(error))
        _send(replies, reply)


if __name__ == "__main__":
    with os.fdopen(int(sys.argv[2]), "rb") as inbox, os.fdopen(int(sys.argv[3]), "wb") as outbox:
        _serve(Path(sys.argv[1]), inbox, outbox)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
