"""From a Hugging Face checkpoint directory (``config.json``, safetensors weights, tokenizer) to
the one ``.pte`` ExecuTorch's device runner runs, and from that back to text on the host.

``export_checkpoint`` writes ``OUT_DIR/model.pte`` (methods ``prefill_forward`` and
``kv_forward``, the runner's metadata methods), for the host ``OUT_DIR/model.ptd`` (the
program's weights, each once), ``OUT_DIR/tokenizer/`` (the checkpoint's tokenizer,
``tokenizer.json`` being what ``qnn_llama_runner --tokenizer_path`` reads) and
``OUT_DIR/manifest.json`` (``manifest.LlmManifest``: the shapes, the runner's ``--decoder_model_version``,
a quantized program's encodings, the data file), all of them or none. ``text_generation``
reads them back and runs them in ``RunnerLoop`` on the host.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..atomic_files import Contents
from ..generated_code import generated_sources_dropped
from ..llm_ops.swap import Swap
from ..progress import Progress, silent
from .calibration_text import CALIBRATION_TOKENS, calibration_prompts
from .checkpoint_reading import (
    LlmCheckpointError,
    OffloadedWeights,
    large_blocks_given_back,
    load_by_layer,
    load_checkpoint,
)
from .config_checks import check_config, check_context
from .export_files import MANIFEST, PROGRAM, PROGRAM_DATA, TOKENIZER, check_replaceable, write_export
from .export_targets import METHODS, qnn_compile_spec
from .families import RUNNER_VERSIONS, family_of, runner_version_of
from .graph_memory import graphs_collected_promptly, provenance_kept_shallow, stack_traces_not_recorded
from .hf import LlmPrograms, export_llm
from .manifest import TARGETS, LlmManifest
from .memory_budget import MemoryBudget, fold_fits
from .runner_loop import method_encodings
from .runner_metadata import eos_ids, runner_metadata
from .runner_text import RunnerText, warn_of_other_tokens


def require_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise LlmCheckpointError(f"{name} {value!r}: use one of {', '.join(choices)}")


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
        eos_ids(text),
        encodings,
    )
    metadata = runner_metadata(programs, model, text, quant, kv_bits)
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
@graphs_collected_promptly()  # the graphs each stage drops, freed as it goes (the imports frozen)
@stack_traces_not_recorded()  # a trace on every node of every graph, read by nothing of an export
@provenance_kept_shallow()  # every node's ancestors copied into it at each retrace: 0.04 GiB of a 3B's peak
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
            release_modules=True,  # the converted graphs: 17,000 of a 3B's 41,000 nodes alive at its peak
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
