"""The raw-file protocol of ``qnn_executor_runner``, used the same way by every target.

Inputs: one raw file per tensor and an input list whose line *i* names the files of
inference *i*, space-separated. Outputs: ``output_<inference>_<index>.raw`` in the output
folder. Raw files hold the tensor's bytes, C order, native (little-endian) layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ReportedError

INPUT_LIST = "input_list.txt"


class RawOutputError(ReportedError, RuntimeError):
    """An output file that is missing or does not hold the expected tensor."""


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        numel = 1
        for dim in self.shape:
            numel *= dim
        return numel * torch.empty((), dtype=self.dtype).element_size()


def raw_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.detach().contiguous().cpu().numpy().tobytes()


def write_inputs(
    inferences: Sequence[Sequence[torch.Tensor]], directory: Path, prefix: str = ""
) -> tuple[Path, list[Path]]:
    """Write every input tensor and the input list; returns (input list, files).

    ``prefix`` is put before each file name in the list (a device directory, say).
    """
    directory.mkdir(parents=True, exist_ok=True)
    lines, files = [], []
    for inference, tensors in enumerate(inferences):
        names = []
        for index, tensor in enumerate(tensors):
            path = directory / f"input_{inference}_{index}.raw"
            path.write_bytes(raw_bytes(tensor))
            files.append(path)
            names.append(f"{prefix}{path.name}")
        lines.append(" ".join(names))
    input_list = directory / INPUT_LIST
    input_list.write_text("\n".join(lines) + "\n")
    return input_list, files


def output_name(inference: int, index: int) -> str:
    return f"output_{inference}_{index}.raw"


def read_outputs(directory: Path, inference: int, specs: Sequence[TensorSpec]) -> list[torch.Tensor]:
    """The outputs of one inference; a missing or wrong-sized file is an error naming it."""
    tensors = []
    for index, spec in enumerate(specs):
        path = directory / output_name(inference, index)
        if not path.is_file():
            raise RawOutputError(f"{path}: missing (the runner wrote no output {index} for inference {inference})")
        data = path.read_bytes()
        if len(data) != spec.nbytes:
            raise RawOutputError(
                f"{path}: {len(data)} bytes, expected {spec.nbytes} for a {spec.dtype} tensor "
                f"of shape {list(spec.shape)}"
            )
        tensors.append(torch.frombuffer(bytearray(data), dtype=spec.dtype).reshape(spec.shape).clone())
    return tensors
