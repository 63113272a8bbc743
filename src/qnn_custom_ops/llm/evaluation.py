"""``llm eval``: how good an export is on a text: its perplexity, and against a reference (another
export, or the checkpoint in transformers) the top-1 agreement and the per-position logits SQNR.

The text is tokenized once and cut into windows the programs take whole (``ctx_len -
prefill_len`` tokens, the longest prompt the runner's prompt processor chunks), each starting
with the runner's BOS, as a prompt does on the phone; each window is scored teacher-forced
through every prefill chunk (``RunnerLoop.score``: the runner's own calls, where the export's
target runs here), so every text token is predicted once, from the tokens before it in its window.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..progress import Progress, silent, time_left
from .checkpoint import LlmCheckpointError, load_checkpoint
from .export_files import MANIFEST
from .export_targets import RUNS_ON
from .runner_text import RunnerText
from .text_generation import LlmExport, export_loop, load_export

#: Seconds between two progress lines (the first and last window are always said).
EVERY_SECONDS = 10.0
#: Token ids of one window -> the logits (reals) ``[len(ids), vocab]`` predicting each next one.
Scorer = Callable[[Sequence[int]], torch.Tensor]


@dataclass(frozen=True)
class Agreement:
    """The export's logits beside a reference's, position by position."""

    reference: str
    kind: str
    perplexity: float
    #: Positions where both pick the same next token, of all positions scored.
    top1_agreement: float
    positions: int
    #: Per-position logits SQNR (dB, the reference's power over the difference's; inf where equal).
    sqnr_min_db: float
    sqnr_median_db: float
    sqnr_mean_db: float


@dataclass(frozen=True)
class Evaluation:
    """An export's perplexity on a text, and, with a reference, how far its logits are from it."""

    export: str
    quant: str
    target: str
    #: Text tokens predicted (every one, once), in ``windows`` windows of up to ``window`` tokens.
    tokens: int
    windows: int
    window: int
    perplexity: float
    seconds: float
    against: Agreement | None = None


def text_windows(ids: Sequence[int], bos: int, length: int) -> list[list[int]]:
    """``ids`` cut into windows of at most ``length`` tokens, each BOS then the next text tokens."""
    step = length - 1
    return [[bos, *ids[start : start + step]] for start in range(0, len(ids), step)]


def _negative_log_likelihood(logits: torch.Tensor, window: Sequence[int]) -> float:
    """The sum over a window of -log p(next token), from its logits."""
    log_p = torch.log_softmax(logits[:-1].double(), dim=-1)
    return float(-log_p.gather(1, torch.tensor(window[1:]).unsqueeze(1)).sum())


def _sqnr_db(reference: torch.Tensor, other: torch.Tensor) -> float:
    reference, other = reference.double(), other.double()
    noise = float((reference - other).pow(2).sum())
    return math.inf if noise == 0 else 10 * math.log10(float(reference.pow(2).sum()) / noise)


@contextmanager
def export_scorer(export: LlmExport, progress: Progress = silent) -> Iterator[Scorer]:
    """The export's programs where its target runs here (``RUNS_ON``), in ``RunnerLoop``: each
    window through the runner's prompt processor, the logits as reals (what they need built
    first said to ``progress``)."""
    with export_loop(export, progress) as loop:
        yield loop.score


@dataclass(frozen=True)
class _Reference:
    """A reference to score beside the export: what it is, its vocabulary, the longest window
    it takes (None: any), and its scorer."""

    kind: str
    vocab: int
    longest: int | None
    scorer: AbstractContextManager[Scorer]
    #: Its tokenizer (the ids scored are the export's: they must mean the same tokens).
    tokenizer: Any


def _export_reference(directory: Path, verify: bool, progress: Progress) -> _Reference:
    other = load_export(directory, verify=verify, progress=progress)
    shape = other.manifest.shape
    kind = f"export, {other.manifest.quant}, {RUNS_ON[other.manifest.target].where}"
    scorer = export_scorer(other, progress)
    return _Reference(kind, shape.vocab, shape.ctx_len - shape.prefill_len, scorer, other.tokenizer)


def _checkpoint_reference(directory: Path, verify: bool, progress: Progress) -> _Reference:
    model, tokenizer = load_checkpoint(directory, progress)

    @contextmanager
    def scorer() -> Iterator[Scorer]:
        def score(ids: Sequence[int]) -> torch.Tensor:
            with torch.no_grad():
                return model(torch.tensor([list(ids)])).logits[0].float()

        yield score

    return _Reference("checkpoint, float32 in transformers", int(model.config.vocab_size), None, scorer(), tokenizer)


#: What ``--against`` may name, told by the file it holds: an export, or a checkpoint.
REFERENCES: dict[str, Callable[[Path, bool, Progress], _Reference]] = {
    MANIFEST: _export_reference,
    "config.json": _checkpoint_reference,
}


def reference_kind(directory: Path) -> str | None:
    """The ``REFERENCES`` key ``directory`` holds, None when it holds neither."""
    return next((marker for marker in REFERENCES if (directory / marker).is_file()), None)


def evaluate(
    export: LlmExport,
    text: str,
    against: Path | None = None,
    verify: bool = True,
    progress: Progress = silent,
) -> Evaluation:
    """The export's perplexity on ``text`` and, with ``against`` (an export directory or a
    checkpoint directory), the reference's perplexity, top-1 agreement and per-position logits
    SQNR, on the same token ids."""
    manifest, tokenizer = export.manifest, export.tokenizer
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if not ids:
        raise LlmCheckpointError("--text: no tokens to score; give a text file with some text in it")
    reference = None
    if against is not None:
        marker = reference_kind(against)
        if marker is None:
            raise LlmCheckpointError(
                f"--against {against}: neither an export ({MANIFEST}) nor a checkpoint (config.json); pass one"
            )
        reference = REFERENCES[marker](against, verify, progress)
        if reference.vocab != manifest.shape.vocab:
            raise LlmCheckpointError(
                f"--against {against}: a vocabulary of {reference.vocab} tokens, the export's is "
                f"{manifest.shape.vocab}; compare an export with its own checkpoint"
            )
        if reference.tokenizer.get_vocab() != tokenizer.get_vocab():
            raise LlmCheckpointError(
                f"--against {against}: its tokenizer is not the export's, so the same ids are other tokens; "
                "compare an export with its own checkpoint, or with another export of it"
            )
    length = manifest.shape.ctx_len - manifest.shape.prefill_len
    if reference is not None and reference.longest is not None:
        length = min(length, reference.longest)
    windows = text_windows(ids, RunnerText.of(tokenizer, manifest.decoder_model_version).bos, max(length, 2))
    where = RUNS_ON[manifest.target].where
    progress(f"eval: {len(ids)} tokens in {len(windows)} windows of up to {length} ({manifest.quant}, {where})")
    started = time.monotonic()
    with (
        export_scorer(export, progress) as score,
        reference.scorer if reference else _no_reference() as score_reference,
    ):
        nll = reference_nll = 0.0
        agreeing, sqnr = 0, []
        said_at = first_done = started
        for done, window in enumerate(windows, 1):
            logits = score(window)
            nll += _negative_log_likelihood(logits, window)
            if score_reference is not None:
                wanted = score_reference(window)
                reference_nll += _negative_log_likelihood(wanted, window)
                agreeing += int((wanted.argmax(-1) == logits.argmax(-1)).sum())
                sqnr += [_sqnr_db(w, g) for w, g in zip(wanted, logits)]
            now = time.monotonic()
            if done == 1:  # its time holds the programs' loading and first calls: no pace to tell from
                first_done = said_at = now
                progress(
                    f"eval: window 1 of {len(windows)} scored in {now - started:.1f} s (the programs loaded with it)"
                )
            elif done in (2, len(windows)) or now - said_at >= EVERY_SECONDS:
                said_at = now
                left = time_left(now - first_done, done - 1, len(windows) - 1)  # the pace after the first
                progress(f"eval: window {done} of {len(windows)} scored{left}")
    agreement = None
    if reference is not None and against is not None:
        agreement = Agreement(
            str(against),
            reference.kind,
            math.exp(reference_nll / len(ids)),
            agreeing / len(sqnr),
            len(sqnr),
            min(sqnr),
            statistics.median(sqnr),
            statistics.fmean(sqnr),
        )
    return Evaluation(
        str(export.directory),
        manifest.quant,
        manifest.target,
        len(ids),
        len(windows),
        length,
        math.exp(nll / len(ids)),
        time.monotonic() - started,
        agreement,
    )


@contextmanager
def _no_reference() -> Iterator[Any]:
    yield None
