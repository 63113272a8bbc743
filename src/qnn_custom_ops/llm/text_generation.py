"""From an export directory back to text on the host: ``load_export`` reads what
``checkpoint.export_checkpoint`` wrote (every file checked against its manifest), and
``generate_text`` runs it as ExecuTorch's device runner does (``RunnerLoop``), where its target
runs here (a host export on the host, a QNN export on QAIRT's x86 HTP simulator).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..progress import Progress, silent
from .checkpoint import require_choice
from .checkpoint_reading import LlmCheckpointError
from .config_checks import first_line
from .export_files import MANIFEST, PROGRAM, TOKENIZER, verify_files
from .export_targets import METHODS, RUNS_ON, ExportedMethods
from .json_values import JsonValueError
from .manifest import LlmManifest
from .manifest_json import check_against_program
from .runner_loop import RunnerLoop, check_fits
from .runner_text import RunnerText
from .sampling import Sampling


@dataclass
class LlmExport:
    """An export directory read back: its manifest, program, the program's data file (None
    when the .pte holds its weights) and tokenizer."""

    directory: Path
    manifest: LlmManifest
    program: bytes
    tokenizer: Any
    data: Path | None = None


def load_export(directory: Path, verify: bool = True, progress: Progress = silent) -> LlmExport:
    """What ``export_checkpoint`` wrote to ``directory``: with ``verify``, only when every file
    is the one its manifest lists (size and sha256) and nothing else is there; always, only
    when the manifest's shapes and encodings are the program's own."""
    import transformers

    manifest = LlmManifest.read(directory, verify)
    if verify:
        started = time.monotonic()
        verify_files(directory, manifest.files)
        size = sum(file.size for file in manifest.files)
        progress(f"checked {len(manifest.files)} files ({size / 1e6:.1f} MB) in {time.monotonic() - started:.1f} s")
    program = directory / PROGRAM
    data = None if manifest.program_data is None else directory / manifest.program_data
    for needed in (program, data, directory / TOKENIZER):
        if needed is not None and not needed.exists():
            raise LlmCheckpointError(f"{directory}: no {needed.name}; export again")
    pte = program.read_bytes()
    try:
        check_against_program(manifest.shape, manifest.encodings, pte, str(directory))
    except JsonValueError as exc:
        raise LlmCheckpointError(f"{directory / MANIFEST}: {exc}; export again") from None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory / TOKENIZER, local_files_only=True)
    except Exception as exc:  # the tokenizers library raises bare Exceptions for a damaged file
        raise LlmCheckpointError(
            f"{directory / TOKENIZER}: cannot load the tokenizer ({type(exc).__name__}: {first_line(exc)}); "
            "export again"
        ) from None
    return LlmExport(directory, manifest, pte, tokenizer, data)


#: ``--chat``'s choices: the runner's template for the version (what the phone formats every
#: ``--prompt`` with), or the tokenizer's own (Hugging Face's, which the phone does not use).
CHAT_TEMPLATES = ("runner", "hf")


def prompt_ids(tokenizer: Any, version: str, text: str, chat: str | None = None) -> list[int]:
    """The prompt's token ids as ``qnn_llama_runner --decoder_model_version version`` computes
    them (``runner_text``: one BOS, the tokenizer's as the runner reads it, then the text):
    with ``chat="runner"`` in the version's template, as the runner formats every ``--prompt``;
    ``chat="hf"`` gives the tokenizer's chat template instead (its ids as Hugging Face makes
    them, BOS included where its template has one: a phone takes those as ``--tokenized_prompt``)."""
    require_choice("--chat", "runner" if chat is None else chat, CHAT_TEMPLATES)
    if chat != "hf":
        return RunnerText.of(tokenizer, version).prompt_ids(text, template=chat == "runner")
    if not getattr(tokenizer, "chat_template", None):
        raise LlmCheckpointError(
            "--chat hf: the tokenizer has no chat template; use --chat for the runner's own template"
        )
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # a BatchEncoding, or the ids


@dataclass(frozen=True)
class TextGeneration:
    """Tokens and text generated, and how fast: the prompt's tokens per second through
    ``prefill_forward``, the new tokens per second through ``kv_forward`` (of several timed
    runs, their medians; each run's in ``prefill_rates`` and ``decode_rates``)."""

    prompt_tokens: int
    tokens: list[int]
    text: str
    prefill_tokens_per_second: float
    decode_tokens_per_second: float
    #: The prompt's token ids, as the runner computes them.
    prompt_ids: tuple[int, ...] = ()
    #: Each timed run's tokens per second (after the warm-up runs), in order.
    prefill_rates: tuple[float, ...] = ()
    decode_rates: tuple[float, ...] = ()


def generate_text(
    export: LlmExport,
    text: str,
    max_new_tokens: int = 64,
    chat: str | None = None,
    on_text: Callable[[str], None] | None = None,
    sampling: Sampling | None = None,
    warmup: int = 0,
    repeat: int = 1,
    progress: Progress = silent,
) -> TextGeneration:
    """Generation from ``text`` as the device runner does it (``RunnerLoop``), where the
    export's target runs here (``RUNS_ON``: a host export on the host, a QNN export on QAIRT's x86
    HTP simulator): greedy, or as ``sampling`` says (each run from the same seed, so every run
    makes the same tokens); ``on_text`` hears the first run's text as it grows, piece by piece.
    ``warmup`` runs first untimed, then ``repeat`` timed runs: the speeds are their medians.
    ``progress`` hears what is built or installed before the programs run (once per machine)."""
    if warmup < 0 or repeat < 1:
        raise LlmCheckpointError(f"warmup {warmup}, repeat {repeat}: give warmup >= 0 and repeat >= 1")
    sampling = sampling or Sampling()
    manifest, tokenizer = export.manifest, export.tokenizer
    ids = prompt_ids(tokenizer, manifest.decoder_model_version, text, chat)
    room = manifest.shape.ctx_len - len(ids)  # the runner's last decode is at ctx_len - 2 (RunnerLoop.generate)
    check_fits(manifest.shape, len(ids), min(max_new_tokens, max(room, 1)), "llm generate")
    with export_loop(export, progress) as loop:
        runs = [
            _generated(
                loop, tokenizer, ids, max_new_tokens, room, manifest.eos_ids, on_text if run == 0 else None, sampling
            )
            for run in range(warmup + repeat)
        ][warmup:]
    prefill_rates = tuple(run.prefill_tokens_per_second for run in runs)
    decode_rates = tuple(run.decode_tokens_per_second for run in runs)
    return replace(
        runs[0],
        prefill_tokens_per_second=statistics.median(prefill_rates),
        decode_tokens_per_second=statistics.median(decode_rates),
        prompt_ids=tuple(ids),
        prefill_rates=prefill_rates,
        decode_rates=decode_rates,
    )


@contextmanager
def export_loop(export: LlmExport, progress: Progress = silent) -> Iterator[RunnerLoop]:
    """The export's two methods in ``RunnerLoop``, where its target runs here (``RUNS_ON``: the
    host, or QAIRT's x86 HTP simulator for a QNN export), codes held as the runner holds them;
    what they need built or installed first is said to ``progress``."""
    manifest = export.manifest
    encodings = None
    if manifest.encodings is not None:
        encodings = (manifest.encodings[METHODS[0]], manifest.encodings[METHODS[1]])
    methods = ExportedMethods(export.program, export.data, manifest.encodings)
    with RUNS_ON[manifest.target].steps(methods, progress) as (prefill, decode):
        yield RunnerLoop(manifest.shape, prefill, decode, encodings)


def _generated(
    loop: RunnerLoop,
    tokenizer: Any,
    ids: list[int],
    max_new_tokens: int,
    room: int,
    eos: Sequence[int],
    on_text: Callable[[str], None] | None,
    sampling: Sampling,
) -> TextGeneration:
    """``loop``'s generation from the prompt ``ids``, streamed to ``on_text`` and timed."""
    shown = ""
    times: list[float] = []

    def heard(tokens: Sequence[int]) -> None:
        """Emit what the text gained, once it no longer ends inside a character (a byte-level
        token may be the first byte of several) and still extends what was shown."""
        nonlocal shown
        times.append(time.monotonic())
        text_so_far = tokenizer.decode(tokens, skip_special_tokens=True)
        if on_text is not None and not text_so_far.endswith("\ufffd") and text_so_far.startswith(shown):
            on_text(text_so_far[len(shown) :])
            shown = text_so_far

    started = time.monotonic()
    choose = None if sampling.greedy else sampling.chooser()  # greedy: the runner's argmax of the codes
    result = loop.generate(ids, min(max_new_tokens, room), eos=eos, on_token=heard, choose=choose)
    prefill_seconds = times[0] - started
    decode_seconds = times[-1] - times[0]
    text = tokenizer.decode(result.tokens, skip_special_tokens=True)
    if on_text is not None and text.startswith(shown) and len(text) > len(shown):
        on_text(text[len(shown) :])  # what waited for a character's last byte
    return TextGeneration(
        len(ids),
        result.tokens,
        text,
        len(ids) / prefill_seconds if prefill_seconds > 0 else float("inf"),
        (len(result.tokens) - 1) / decode_seconds if decode_seconds > 0 else float("nan"),
    )
