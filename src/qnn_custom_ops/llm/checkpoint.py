"""From a Hugging Face checkpoint directory (``config.json``, safetensors weights, tokenizer) to
the one ``.pte`` ExecuTorch's device runner runs, and from that back to text on the host.

``export_checkpoint`` writes ``OUT_DIR/model.pte`` (methods ``prefill_forward`` and
``kv_forward``, the runner's metadata methods), for the host ``OUT_DIR/model.ptd`` (the
program's weights, each once), ``OUT_DIR/tokenizer/`` (the checkpoint's tokenizer,
``tokenizer.json`` being what ``qnn_llama_runner --tokenizer_path`` reads) and
``OUT_DIR/manifest.json`` (``LlmManifest``: the shapes, the runner's ``--decoder_model_version``,
a quantized program's encodings, the data file), all of them or none. ``text_generation``
reads them back and runs them in ``RunnerLoop`` on the host.
"""

from __future__ import annotations

import json
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..atomic_files import Contents
from ..generated_code import generated_sources_dropped
from ..llm_ops.swap import Swap
from ..progress import Progress, silent
from .checkpoint_reading import (
    LlmCheckpointError,
    OffloadedWeights,
    large_blocks_given_back,
    load_by_layer,
    load_checkpoint,
)
from .config_checks import check_config, check_context
from .export_files import (
    MANIFEST,
    PROGRAM,
    PROGRAM_DATA,
    TOKENIZER,
    ExportFile,
    check_replaceable,
    relative_path,
    write_export,
)
from .export_targets import METHODS, qnn_compile_spec
from .families import FAMILIES, RUNNER_VERSIONS, family_of, runner_version_of
from .hf import LlmPrograms, export_llm
from .json_values import JsonValueError, integer, load_object, required, sequence, string
from .manifest_json import (
    LARGEST_SIZE,
    MANIFEST_LIMIT,
    checksum,
    encodings_from_json,
    encodings_to_json,
    shape_from_json,
)
from .memory_budget import MemoryBudget, fold_fits
from .runner_loop import MethodEncodings, method_encodings
from .runner_text import RunnerText, warn_of_other_tokens
from .shapes import LlmShape

TARGETS = ("host", "qnn")
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


@dataclass(frozen=True)
class LlmManifest:
    """What ``llm export`` wrote, read back whole and checked once: every value typed and in
    range (``manifest_json``) before anything is sized by it."""

    model_type: str
    decoder_model_version: str
    quant: str
    target: str
    shape: LlmShape
    eos_ids: tuple[int, ...]
    #: Per method, its inputs' and outputs' encodings (a quantized program's; None for float).
    encodings: dict[str, MethodEncodings] | None
    #: The data file beside the program holding its weights (a host export's), None when the
    #: .pte holds them (a QNN export's, or a host export written before the data file).
    program_data: str | None = None
    #: Every file of the export but the manifest, with its size and sha256 (``llm generate``
    #: checks them); empty in a manifest written before exports listed their files.
    files: tuple[ExportFile, ...] = ()

    def __post_init__(self) -> None:
        from ..quantizer import QUANT_MODES

        for key, value, choices in (
            ("model_type", self.model_type, tuple(FAMILIES)),
            ("decoder_model_version", self.decoder_model_version, tuple(RUNNER_VERSIONS)),
            ("quant", self.quant, ("none", *QUANT_MODES)),
            ("target", self.target, TARGETS),
        ):
            if value not in choices:
                raise JsonValueError(f"{key} is {value!r}, not one of {', '.join(choices)}")
        if self.program_data is not None:
            relative_path(self.program_data, "program_data")
        listed = {file.path for file in self.files}
        unlisted = [name for name in (PROGRAM, self.program_data) if self.files and name and name not in listed]
        if unlisted:
            raise JsonValueError(f"files does not list {unlisted[0]}")

    def to_json(self) -> str:
        body = {
            **asdict(self),
            "shape": asdict(self.shape),
            "eos_ids": list(self.eos_ids),
            "encodings": encodings_to_json(self.encodings),
            "files": [file.to_json() for file in self.files],
        }
        return json.dumps({**body, "checksum": checksum(body)}, indent=2)

    @staticmethod
    def read(directory: Path, verify: bool = True) -> LlmManifest:
        """The manifest of an export directory, or one error saying what to do; ``verify``: its
        checksum too (an edit or a flipped bit in any value is refused)."""
        path = directory / MANIFEST
        if not path.is_file():
            raise LlmCheckpointError(
                f"{directory}: no {MANIFEST}; pass a directory written by qnn-custom-ops llm export"
            )
        try:
            body = load_object(path, MANIFEST_LIMIT)
            manifest = LlmManifest(
                string(required(body, "model_type"), "model_type"),
                string(required(body, "decoder_model_version"), "decoder_model_version"),
                string(required(body, "quant"), "quant"),
                string(required(body, "target"), "target"),
                shape_from_json(required(body, "shape")),
                tuple(integer(i, "eos_ids[]", 0, LARGEST_SIZE) for i in sequence(required(body, "eos_ids"), "eos_ids")),
                encodings_from_json(required(body, "encodings"), METHODS),
                None if body.get("program_data") is None else string(body["program_data"], "program_data"),
                tuple(ExportFile.from_json(file) for file in sequence(body.get("files", []), "files")),
            )
        except JsonValueError as exc:
            raise LlmCheckpointError(
                f"{path}: not a manifest written by qnn-custom-ops llm export ({exc}); export again"
            ) from None
        if verify and ("checksum" not in body or not manifest.files):
            raise LlmCheckpointError(
                f"{path}: written before exports listed their files, so they cannot be checked; export again "
                "(or pass --no-verify to use it as it is)"
            )
        if verify and body["checksum"] != checksum(body):
            raise LlmCheckpointError(
                f"{path}: its values were changed after llm export wrote them (its checksum differs); export "
                "again (or pass --no-verify to use it as it is)"
            )
        return manifest


def require_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise LlmCheckpointError(f"{name} {value!r}: use one of {', '.join(choices)}")


def _eos_ids(text: RunnerText) -> tuple[int, ...]:
    """The tokens ``qnn_llama_runner`` stops on for the version and the ``tokenizer.json``
    pushed beside it (``runner_text``): what ``llm generate`` stops on too, so host and phone
    stop at the same token."""
    return text.stop_ids()


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


def _runner_metadata(
    programs: LlmPrograms, model: Any, text: RunnerText, quant: str, kv_bits: int = 16
) -> dict[str, Any]:
    """The constant methods ExecuTorch's static llama writes (``static_llama.py:807-824``, with
    ``get_sliding_window`` where a window mask is taken), with what the runners of ExecuTorch
    1.x read (checked: release/1.0 to 1.4 and main of 2026-08-22): ``get_n_layers``, required
    (``runner.cpp:234-237``), and ``get_sliding_window`` when present (``runner.cpp:274-279``);
    runners before 1.4 (PR #19146) also read ``get_kv_io_bit_width`` (``qnn_llama_runner.cpp``
    of release/1.3, lines 299-318: 8 when absent, 8 or 16 accepted, any other refused). Its
    value is ExecuTorch's own (``static_llm_quant_recipe.py:32-43``, ``llm_wrappers.py:439-442``):
    8 for 8a8w, 16 for the other quantized modes, 32 for float, which those runners refuse --
    they hold masks and logits as uint16 codes and cannot run a float program (nor an 8a8w one,
    whose mask and logits are uint8 here: it needs a 1.4 runner or later). BOS and EOS are the
    runner's own (``runner_text``); it prepends one BOS (``get_n_bos``). ``kv_bits`` 8 (8-bit
    caches under a 16-bit-activation mode, ``quantize_llm``'s) makes it 8, as ExecuTorch's
    8-bit KV recipes write it."""
    shape, config = programs.shape, model.config
    bits = {"none": 32, "8a8w": 8}.get(quant, kv_bits)
    metadata: dict[str, Any] = {
        "get_ar_len": 1,
        "get_bos_id": text.bos,
        "get_eos_id": text.eos,
        "get_dim": int(config.hidden_size),
        "get_head_dim": shape.head_dim,
        "get_max_batch_size": 1,
        "get_max_seq_len": shape.ctx_len,
        "get_max_context_len": shape.ctx_len,
        "get_n_bos": 1,
        "get_n_eos": 1,
        "get_n_kv_heads": shape.kv_heads,
        "get_n_layers": shape.layers,
        "get_vocab_size": shape.vocab,
        "get_use_kv_cache": True,
        "get_kv_io_bit_width": bits,
    }
    if shape.window is not None:
        metadata["get_sliding_window"] = shape.window
    return metadata


@dataclass(frozen=True)
class _ToLower:
    """What lowering needs of a checkpoint: the two methods' modules and example inputs, the
    manifest and the runner's metadata. Of a quantized export it holds the converted modules
    only, so the float model is freed before lowering (its float32 weights are the largest thing
    an export holds)."""

    methods: dict[str, tuple[torch.nn.Module, tuple]]
    manifest: LlmManifest
    metadata: dict[str, Any]
    tokenizer: Any
    fold: bool  # a quantized host program's weights folded into float32 (``lower_methods``' fold_weights)


def static_programs(
    checkpoint: Path, prefill_len: int, ctx_len: int, decoder_model_version: str | None, progress: Progress
) -> tuple[Any, Any, RunnerText, LlmPrograms]:
    """The checkpoint's model, tokenizer, the runner's text handling for its
    ``--decoder_model_version`` (the family's, told by the tokenizer where one family has
    several, or the one given), and its programs exported in the runner's layout for it."""
    model, tokenizer = load_checkpoint(checkpoint, progress)
    text, programs = _exported(model, tokenizer, prefill_len, ctx_len, decoder_model_version, progress)
    return model, tokenizer, text, programs


def programs_by_layer(
    checkpoint: Path,
    store: Path,
    prefill_len: int,
    ctx_len: int,
    decoder_model_version: str | None,
    progress: Progress,
) -> tuple[Any, Any, RunnerText, LlmPrograms, OffloadedWeights]:
    """``static_programs`` of the checkpoint read a layer at a time (``load_by_layer``), the
    weights in ``store`` (``OffloadedWeights``, named as the programs name them)."""
    model, tokenizer, swaps, weights = load_by_layer(checkpoint, store, progress)
    text, programs = _exported(model, tokenizer, prefill_len, ctx_len, decoder_model_version, progress, swaps)
    weights.bind(programs.prefill.module)
    return model, tokenizer, text, programs, weights


def _exported(
    model: Any,
    tokenizer: Any,
    prefill_len: int,
    ctx_len: int,
    decoder_model_version: str | None,
    progress: Progress,
    swapped: list[Swap] | None = None,
) -> tuple[RunnerText, LlmPrograms]:
    """The runner's text handling for the model's version and its programs in the runner's layout."""
    started = time.monotonic()
    added = tokenizer.get_added_vocab()  # tokenizer.json's added tokens: the runner's special tokens
    version = runner_version_of(family_of(model.config.model_type), added, decoder_model_version)
    text = RunnerText.of(tokenizer, version)
    warn_of_other_tokens(text)
    programs = export_llm(
        model, prefill_len=prefill_len, ctx_len=ctx_len, cache="runner", runner_version=version, swapped=swapped
    )
    progress(
        f"exported prefill ({prefill_len} tokens) and decode over ctx_len {ctx_len} in "
        f"{time.monotonic() - started:.1f} s"
    )
    return text, programs


#: ``--keep-8bit auto``'s default target: the top-1 agreement with float on the calibration text.
KEEP_TARGET = 0.97


def _chosen_kept(
    programs: LlmPrograms, quant: str, prompts: Sequence[Sequence[int]], target: float, progress: Progress
) -> tuple[str, ...]:
    """``--keep-8bit auto``: the parts ``sensitivity.choose_kept`` keeps at 8 bits, measured on
    the calibration prompts; said, and a warning when keeping every part misses the target."""
    from .sensitivity import choose_kept

    started = time.monotonic()
    choice = choose_kept(programs, quant, prompts, prompts, target, progress)
    kept = ", ".join(choice.kept) or "nothing"
    progress(
        f"keep-8bit auto: kept {kept} at 8-bit weights ({choice.weight_share:.0%} of the 4-bit weights): top-1 "
        f"agreement {choice.top1_agreement:.1%} on the calibration text, target {target:.1%} "
        f"({time.monotonic() - started:.1f} s)"
    )
    if not choice.reached:
        warnings.warn(
            f"--keep-8bit auto: even with every projection at 8-bit weights {quant} agrees with float on "
            f"{choice.top1_agreement:.1%} of top-1 tokens, below the target {target:.1%}: the rest is its "
            "activations; try --qat, or a 16a8w export",
            LlmQuantWarning,
            stacklevel=2,
        )
    return choice.kept


class LlmQuantWarning(UserWarning):
    """A quantized export that misses what was asked of it (said, never silent)."""


def _programs_to_lower(
    checkpoint: Path,
    budget: MemoryBudget,
    prefill_len: int,
    ctx_len: int,
    quant: str,
    calibration: Sequence[str] | None,
    target: str,
    progress: Progress,
    decoder_model_version: str | None = None,
    qat: Any = None,
    kv_bits: int = 16,
    keep_8bit: Sequence[str] | str = (),
    keep_target: float = KEEP_TARGET,
    store: Path | None = None,
) -> _ToLower:
    """The checkpoint loaded, exported in the runner's layout for its ``--decoder_model_version``
    (the family's, told by the tokenizer where one family has several, or the one given) and,
    unless ``quant`` is none, quantized on the calibration text (``keep_8bit``: ``export_checkpoint``'s).
    With a ``store`` directory it reads the model a layer at a time and quantizes it so
    (``layer_stages``; ``by_layer``). A quantized host program whose folded weights would not fit
    ``budget`` (``_folded_weights_fit``) keeps its codes, stored in their own width as they are made."""
    from .layer_stages import quantize_by_layer
    from .quantization import quantize_llm

    weights = None
    if store is not None:
        model, tokenizer, text, programs, weights = programs_by_layer(
            checkpoint, store, prefill_len, ctx_len, decoder_model_version, progress
        )
    else:
        model, tokenizer, text, programs = static_programs(
            checkpoint, prefill_len, ctx_len, decoder_model_version, progress
        )
    version = programs.runner_version
    modules: tuple[torch.nn.Module, torch.nn.Module] = (programs.prefill.module, programs.decode.module)
    encodings = None
    fold = target == "host" and quant != "none" and _folded_weights_fit(programs, progress, budget)
    if quant != "none":
        prompts = calibration_prompts(tokenizer, programs.shape, calibration, version=version)
        if keep_8bit == "auto":
            keep_8bit = _chosen_kept(programs, quant, prompts, keep_target, progress)
        started = time.monotonic()
        if weights is not None:
            modules = quantize_by_layer(
                programs,
                weights,
                quant,
                prompts,
                CALIBRATION_TOKENS,
                progress,
                kv_bits,
                keep_8bit,
                narrow=target == "host" and not fold,
            )
        else:
            modules = quantize_llm(
                programs,
                quant,
                prompts,
                CALIBRATION_TOKENS,
                progress=progress,
                qat=qat,
                kv_bits=kv_bits,
                keep_8bit=keep_8bit,
            )
        progress(f"quantized {quant} in {time.monotonic() - started:.1f} s")
        _release_float_weights(model, modules)
        encodings = dict(zip(METHODS, (method_encodings(m) for m in modules)))
    inputs = (programs.prefill.example_inputs, programs.decode.example_inputs)
    manifest = LlmManifest(
        model.config.model_type,
        programs.runner_version,
        quant,
        target,
        programs.shape,
        _eos_ids(text),
        encodings,
    )
    metadata = _runner_metadata(programs, model, text, quant, kv_bits)
    return _ToLower(dict(zip(METHODS, zip(modules, inputs))), manifest, metadata, tokenizer, fold)


def _release_float_weights(model: torch.nn.Module, converted: Sequence[torch.nn.Module]) -> None:
    """Free the float weights of a quantized export's model, but those the converted programs
    still read: they are the largest thing an export holds (12 GB for a 3B model in float32),
    and the exported programs, still held, share them, so dropping the model would not free them."""
    kept = {t.untyped_storage().data_ptr() for m in converted for t in m.state_dict().values()}
    for parameter in model.parameters():
        if parameter.untyped_storage().data_ptr() not in kept:
            parameter.data = torch.empty(0, dtype=parameter.dtype)


def _folded_weights_fit(programs: LlmPrograms, progress: Progress, budget: MemoryBudget) -> bool:
    """Whether a quantized host program gets its weights folded into float32 (``lower``'s
    ``fold_weights``), decided against the memory budget (``memory_budget.fold_fits``) before it is
    quantized, so that codes kept are stored in their own width as they are made: the weights
    quantized are the model's matrices (a tied one once)."""
    matrices = sum(p.numel() for p in programs.prefill.module.parameters() if p.dim() >= 2)
    return fold_fits(4 * matrices, budget, progress)


@generated_sources_dropped()  # a few hundred recompiles' sources: 10 % of a 3B program of codes
def export_checkpoint(
    checkpoint: Path,
    out_dir: Path,
    prefill_len: int = 32,
    ctx_len: int = 512,
    quant: str = "none",
    calibration: Sequence[str] | None = None,
    target: str = "host",
    soc: str | None = None,
    progress: Progress = silent,
    decoder_model_version: str | None = None,
    qat: Any = None,
    kv_bits: int = 16,
    keep_8bit: Sequence[str] | str = (),
    keep_target: float = KEEP_TARGET,
    max_memory: float | None = None,
    shards: int | None = None,
) -> LlmManifest:
    """``llm export``: the checkpoint's programs in the runner's layout, quantized on the
    calibration text (one prompt a line; a built-in text by default), lowered for ``target``,
    written to ``out_dir`` whole or not at all. ``decoder_model_version`` overrides the
    runner's version told from the checkpoint. ``qat`` (steps, or a ``qat.QatConfig``) trains
    the weights quantization-aware on the calibration text first; ``kv_bits=8`` gives a
    16-bit-activation mode 8-bit caches (``quantize_llm``'s, and ``get_kv_io_bit_width`` 8).
    ``keep_8bit`` names parts a 4-bit mode keeps at 8-bit weights (``parts.resolve_kept``), or is
    ``"auto"``: the fewest of the most sensitive that reach ``keep_target`` top-1 agreement with
    float on the calibration text (``sensitivity.choose_kept``). ``max_memory`` (GiB; default what is
    free when called) is the memory budget: a quantized host program whose folded float32 weights
    would not fit keeps its codes (``memory_budget``). ``shards`` (``--target qnn``): the decoder's
    layers in that many QNN contexts per method; None: as many as keep each context's weights within
    ``lowering.shards.WEIGHT_BUDGET`` (said to ``progress``). A quantized export without QAT or
    ``keep_8bit="auto"`` (which train or measure the whole model) reads the model a layer at a time
    (``checkpoint_reading.load_by_layer``, ``layer_stages``): it never holds it in float32."""
    from ..llm_ops.ops import llm_binding
    from ..lowering.program import lower_methods
    from ..quantizer import QUANT_MODES
    from .cache_encodings import check_kv_bits
    from .qat import check_qat

    require_choice("--quant", quant, ("none", *QUANT_MODES))
    require_choice("--target", target, TARGETS)
    if quant == "none" and (qat is not None or kv_bits != 16 or keep_8bit):
        raise LlmCheckpointError("--qat, --kv-bits and --keep-8bit quantize: pass --quant too (16a4w, 16a8w, ...)")
    if quant != "none":
        check_kv_bits(kv_bits, quant)
        if qat is not None:
            check_qat(qat, quant)
    if decoder_model_version is not None:  # before the checkpoint is read
        require_choice("--decoder-model-version", decoder_model_version, tuple(RUNNER_VERSIONS))
    if shards is not None:
        _check_shards(shards, target, checkpoint)
    check_replaceable(out_dir)  # before the long steps, and again when written
    budget = MemoryBudget.of(max_memory)  # what is free before this export takes any
    spec = qnn_compile_spec(soc, quant, progress) if target == "qnn" else None
    check_context(checkpoint, ctx_len)
    by_layer = quant != "none" and qat is None and keep_8bit != "auto"
    with (
        _weights_store(out_dir) if by_layer else nullcontext() as store,
        large_blocks_given_back() if by_layer else nullcontext(),
    ):
        staged = _programs_to_lower(
            checkpoint,
            budget,
            prefill_len,
            ctx_len,
            quant,
            calibration,
            target,
            progress,
            decoder_model_version,
            qat,
            kv_bits,
            keep_8bit,
            keep_target,
            Path(store) if store is not None else None,
        )
    started = time.monotonic()
    delegated = target == "host" and quant == "none"  # a quantized host program runs on the portable kernels
    told = ", the time left told as XNNPACK compiles its partitions" if delegated else ""
    progress(f"lowering {' and '.join(METHODS)} for {target} (the longest step{told})")
    with large_blocks_given_back() if by_layer and target == "host" else nullcontext():  # not QAIRT's compile
        lowered = lower_methods(
            staged.methods,
            llm_binding(),
            target,
            compile_spec=spec,
            constant_methods=staged.metadata,
            plan_outputs=False,
            codes_io=target == "qnn" and quant != "none",
            fold_weights=staged.fold,
            external_weights=target == "host",
            shards=shards if target == "qnn" else 1,
            progress=progress,
        )
    progress(f"lowered in {time.monotonic() - started:.1f} s")
    data = lowered.write_data_to if lowered.has_data_file else None
    manifest = replace(staged.manifest, program_data=PROGRAM_DATA if data is not None else None)
    manifest = _write_export(out_dir, lowered.write_to, data, manifest, staged.tokenizer)
    progress(f"wrote {', '.join(_written(out_dir, manifest))}, {out_dir}/{TOKENIZER}/ and {out_dir}/{MANIFEST}")
    return manifest


@contextmanager
def _weights_store(out_dir: Path) -> Iterator[str]:
    """A directory beside ``out_dir`` (in its nearest existing parent: on the disk the export goes
    to, never a RAM-backed ``/tmp``) where a layer-at-a-time export keeps its float weights until
    converted; removed after."""
    parent = next(d for d in out_dir.absolute().parents if d.is_dir())
    try:
        store = tempfile.TemporaryDirectory(dir=parent, prefix=f".{out_dir.name}.weights.")
    except OSError as exc:
        raise LlmCheckpointError(
            f"-o {out_dir}: cannot make a directory in {parent} ({exc.strerror}); choose -o where you can write"
        ) from None
    with store as path:
        yield path


def _check_shards(shards: int, target: str, checkpoint: Path) -> None:
    """``--shards``: for a QNN export, 1 to the checkpoint's layers (its config.json's)."""
    if target != "qnn":
        raise LlmCheckpointError("--shards splits a QNN program into contexts of layers: give --target qnn too")
    layers = check_config(checkpoint).get("num_hidden_layers") if (checkpoint / "config.json").is_file() else None
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise LlmCheckpointError(f"--shards {shards!r}: give a whole number of 1 or more")
    if isinstance(layers, int) and shards > layers:
        raise LlmCheckpointError(f"--shards {shards}: the model has {layers} layers; give 1 to {layers}")


def _written(out_dir: Path, manifest: LlmManifest) -> list[str]:
    """The program's files and their sizes, as ``llm export`` reports them."""
    sizes = {file.path: file.size for file in manifest.files}
    names = [PROGRAM] if manifest.program_data is None else [PROGRAM, manifest.program_data]
    return [f"{out_dir}/{name} ({sizes[name] / 1e6:.1f} MB)" for name in names]


def _write_export(
    out_dir: Path, program: Contents, data: Contents | None, manifest: LlmManifest, tokenizer: Any
) -> LlmManifest:
    """Every file of the export and the manifest listing them, in a fresh directory that takes
    ``out_dir``'s place whole (``export_files.write_export``); the manifest written. ``data`` is
    the program's data file, for a program that keeps its weights in one."""
    with tempfile.TemporaryDirectory(prefix="qco-tokenizer-") as saved:
        tokenizer.save_pretrained(saved)
        tokenizer_files: list[tuple[str, Contents]] = [
            (f"{TOKENIZER}/{p.relative_to(saved).as_posix()}", p.read_bytes())
            for p in sorted(Path(saved).rglob("*"))
            if p.is_file()
        ]
    files = [(PROGRAM, program), *([] if data is None else [(PROGRAM_DATA, data)]), *tokenizer_files]
    table = write_export(out_dir, files, lambda listed: replace(manifest, files=listed).to_json().encode())
    return replace(manifest, files=table)
