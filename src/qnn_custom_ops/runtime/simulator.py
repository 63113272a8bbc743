"""Run a QNN-delegated ``.pte`` on QAIRT's x86 HTP simulator with ExecuTorch's own runtime.

ExecuTorch's wheel carries its QNN runtime backend; with the SDK root of ``simulator_sdk`` (our
shim over QAIRT's real x86 backend) it executes the context binaries ``QnnPartitioner`` wrote.
The program runs in a child process started with that environment (the loader reads
``LD_LIBRARY_PATH`` only at start), which ends without running the backend's static
destructors (they crash at exit in these releases: "free(): invalid size").

    python -m qnn_custom_ops.runtime.simulator MODEL.pte INPUTS.pt OUTPUTS.pt   # the child
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ReportedError
from .simulator_sdk import SIMULATOR_QAIRT, simulator_environment

Inference = Sequence[torch.Tensor]


class SimulatorRunError(ReportedError, RuntimeError):
    """The program could not be loaded or run on the simulator."""


@dataclass(frozen=True)
class SimulatorRunner:
    """ExecuTorch's runtime (its wheel's QNN backend) on QAIRT ``version``'s x86 HTP simulator."""

    version: str = SIMULATOR_QAIRT

    def run(self, pte: bytes, inferences: Sequence[Inference], method: str = "forward") -> list[list[torch.Tensor]]:
        with tempfile.TemporaryDirectory(prefix="qco-simulator-") as tmp:
            work = Path(tmp)
            (work / "model.pte").write_bytes(pte)
            torch.save([list(i) for i in inferences], work / "inputs.pt")
            command = [sys.executable, "-m", __name__, str(work / "model.pte"), str(work / "inputs.pt"),
                       str(work / "outputs.pt"), method]  # fmt: skip
            environment = {**os.environ, **simulator_environment(self.version)}
            result = subprocess.run(command, capture_output=True, text=True, env=environment)
            if result.returncode != 0 or not (work / "outputs.pt").is_file():
                reason = _reason(result.stderr)
                raise SimulatorRunError(f"the program did not run on QAIRT {self.version}'s HTP simulator: {reason}")
            return torch.load(work / "outputs.pt")


def _reason(stderr: str) -> str:
    """Why the child failed: the shim's own line (the backend could not be loaded), the child's, or
    the backend's last errors."""
    lines = stderr.splitlines()
    for prefix in ("qnn-custom-ops QNN shim: ", "error: "):
        said = [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]
        if said:
            return said[-1]
    errors = [line.strip() for line in lines if "ERROR" in line or "error" in line]
    return " | ".join(errors[-3:]) or "it ended without a word"


def _child(pte: Path, inputs: Path, outputs: Path, method: str) -> int:
    from executorch.runtime import Runtime

    try:
        loaded = Runtime.get().load_program(pte).load_method(method)
        results = [[t.clone() for t in loaded.execute(list(inference))] for inference in torch.load(inputs)]
    except (RuntimeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    torch.save(results, outputs)
    return 0


if __name__ == "__main__":
    status = _child(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
