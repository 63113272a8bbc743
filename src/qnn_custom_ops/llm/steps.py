"""What a generation loop calls and returns: one program call (``Step``), run eagerly, on the
host ExecuTorch runtime or on QAIRT's x86 HTP simulator, the tokens it chose (``Generation``),
and the check every token id passes before it reaches a program.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..lowering.quantized_io import from_io_codes, to_io_codes
from ..runtime import HostRunner
from ..runtime.simulator import SimulatorSession
from ..torch_bridge.quantized import Encoding, dequantize_codes, quantize_codes
from .families import LlmExportError

#: One call of a program: its inputs -> its outputs.
Step = Callable[[tuple], Sequence[torch.Tensor]]


def eager_step(module: torch.nn.Module) -> Step:
    """A program's module (float, or converted by PT2E) called in PyTorch."""

    def step(inputs: tuple) -> list[torch.Tensor]:
        with torch.no_grad():
            return list(module(*inputs))

    return step


def host_step(runner: HostRunner, program: bytes, method: str = "forward", data: Path | None = None) -> Step:
    """A lowered program's method (``qco.lower(...).buffer``) run by ExecuTorch on the host;
    ``data``: the data file its weights are in, for a program lowered with ``external_weights=True``."""
    return lambda inputs: runner.run(program, [inputs], method=method, data=data)[0]


def codes_step(run: Step, inputs: Sequence[Encoding | None], outputs: Sequence[Encoding | None]) -> Step:
    """A method lowered with ``codes_io`` (it takes and gives codes, as the phone's runner passes
    them) as a step on reals: each input quantized under its encoding, each output dequantized
    under its (the round trip is exact on the codes a ``RunnerLoop`` holds)."""

    def step(reals: tuple) -> list[torch.Tensor]:
        codes = tuple(to_io_codes(quantize_codes(t, e), e) for t, e in zip(reals, inputs))
        return [dequantize_codes(from_io_codes(t, e), e) for t, e in zip(run(codes), outputs)]

    return step


def simulator_step(session: SimulatorSession, method: str) -> Step:
    """A method of the program ``session`` holds, on QAIRT's x86 HTP simulator."""
    return lambda inputs: session.run(method, inputs)


@dataclass
class Generation:
    """Tokens chosen, the logits each was chosen from, and (``record=True``) every call's inputs."""

    tokens: list[int]
    logits: list[torch.Tensor]
    prefill_inputs: list[tuple]
    decode_inputs: list[tuple]


def token_ids(tokens: Sequence[object], vocab: int, where: str) -> list[int]:
    """``tokens`` as ints, each a whole number in ``[0, vocab)``: a float, a bool or an id past
    the vocabulary is one error naming it (an embedding would index out of range, or take
    1.7 as 1 without a word)."""
    ids = []
    for index, token in enumerate(tokens):
        if isinstance(token, torch.Tensor) and token.numel() == 1 and not token.is_floating_point():
            token = token.item()
        if isinstance(token, bool) or not isinstance(token, numbers.Integral):
            raise LlmExportError(f"{where}: token {index} is {token!r}, not a whole-number token id")
        if not 0 <= int(token) < vocab:
            raise LlmExportError(
                f"{where}: token {index} is {int(token)}, outside the vocabulary (ids 0 to {vocab - 1}); "
                "encode the text with the model's own tokenizer"
            )
        ids.append(int(token))
    return ids


def snapshot(inputs: tuple) -> tuple:
    """Inputs kept for calibration: the caches are written in place afterwards."""
    return tuple(t.clone() for t in inputs)
