"""``llm analyze``: a checkpoint's parts ranked by what a quantization mode costs each alone
(``sensitivity.analyze``), measured on the calibration text or a text of the user's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..progress import Progress, silent
from .calibration_text import calibration_prompts
from .checkpoint import LlmCheckpointError, static_programs
from .evaluation import text_windows
from .sensitivity import Sensitivity, analyze


@dataclass(frozen=True)
class Analysis:
    """What ``llm analyze`` found: each part's cost, the most sensitive first."""

    checkpoint: str
    quant: str
    #: Positions scored, in ``windows`` windows (of the calibration text, or ``--text``).
    positions: int
    windows: int
    text: str
    seconds: float
    rows: tuple[Sensitivity, ...]


def analyze_checkpoint(
    checkpoint: Path,
    quant: str,
    calibration: Sequence[str] | None = None,
    text: str | None = None,
    prefill_len: int = 32,
    ctx_len: int = 512,
    progress: Progress = silent,
) -> Analysis:
    """The checkpoint's programs as ``llm export`` makes them, each part quantized alone at
    ``quant`` (a 4-bit mode's ``lm_head`` at 8-bit weights, as exported), calibrated on the
    calibration text (one prompt a line; the built-in text by default) and scored against float
    on ``text`` (default: the calibration text)."""
    from ..quantizer import QUANT_MODES

    if quant not in QUANT_MODES:
        raise LlmCheckpointError(f"--quant {quant!r}: analyze a quantization, one of {', '.join(QUANT_MODES)}")
    _, tokenizer, runner_text, programs = static_programs(checkpoint, prefill_len, ctx_len, None, progress)
    prompts = calibration_prompts(tokenizer, programs.shape, calibration, version=programs.runner_version)
    windows, told = prompts, "the calibration text"
    if text is not None:
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if not ids:
            raise LlmCheckpointError("--text: no tokens to score; give a text file with some text in it")
        windows, told = text_windows(ids, runner_text.bos, ctx_len - prefill_len), "--text"
    started = time.monotonic()
    rows = analyze(programs, quant, prompts, windows, progress)
    positions = sum(len(window) for window in windows)
    return Analysis(str(checkpoint), quant, positions, len(windows), told, time.monotonic() - started, tuple(rows))


def table(analysis: Analysis) -> str:
    """The analysis as text: a heading, then one line per part, the most sensitive first."""
    lines = [
        f"{analysis.checkpoint}: each part quantized alone at {analysis.quant}, the rest float; logits against "
        f"float over {analysis.positions} positions of {analysis.text} ({analysis.seconds:.0f} s)",
        f"{'rank':>4}  {'part':<28}{'kind':<14}{'SQNR dB':>9}{'top-1 agree':>13}",
    ]
    for rank, row in enumerate(analysis.rows, 1):
        lines.append(f"{rank:>4}  {row.part:<28}{row.kind:<14}{row.sqnr_db:>9.1f}{row.top1_agreement:>13.1%}")
    return "\n".join(lines) + "\n"
