"""The text an LLM export calibrates on: the user's lines or a built-in set, each tokenized as the
phone will be given it (``calibration_prompts``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .checkpoint_reading import LlmCheckpointError
from .runner_text import RunnerText
from .shapes import LlmShape

#: Calibration text when the user gives none: varied English, one prompt a line.
DEFAULT_CALIBRATION = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "In 1969, astronauts landed on the Moon and walked on its dusty surface.",
    "def add(a, b):\n    return a + b",
    "Once upon a time, in a small village by the sea, there lived an old fisherman.",
    "Water boils at 100 degrees Celsius at sea level; at altitude it boils sooner.",
    "Please summarise the following paragraph in two sentences.",
    "The stock market rose sharply on Tuesday after the central bank's announcement.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
)


#: Tokens generated from each calibration prompt (their decode inputs are calibrated too).
CALIBRATION_TOKENS = 16


def calibration_prompts(
    tokenizer: Any,
    shape: LlmShape,
    lines: Sequence[str] | None,
    where: str = "calibration",
    version: str | None = None,
) -> list[list[int]]:
    """Each non-empty line tokenized as the phone will be given it: with ``version``, as
    ``qnn_llama_runner --decoder_model_version version --prompt LINE`` encodes it (its BOS, at
    position 0 where a model keeps its attention sink, and the version's template), else by the
    tokenizer alone; cut to what the programs take with room for the calibration tokens
    (``ctx_len - len(prompt)`` at most, as the runner generates). However short the lines,
    calibration covers every chunk and the whole context (``quantize_llm`` walks them as one
    text repeated to the context's length)."""
    texts = [line for line in (lines if lines is not None else DEFAULT_CALIBRATION) if line.strip()]
    if not texts:
        raise LlmCheckpointError(f"{where}: no text to calibrate on; give one prompt per line")
    longest = min(shape.ctx_len - shape.prefill_len, shape.ctx_len - CALIBRATION_TOKENS)
    if version is None:
        return [tokenizer(text)["input_ids"][:longest] for text in texts]
    runner = RunnerText.of(tokenizer, version)
    return [runner.prompt_ids(text)[:longest] for text in texts]
