"""``llm export``: a checkpoint directory to the program ExecuTorch's ``qnn_llama_runner`` runs, a thin
layer over ``llm.checkpoint.export_checkpoint``; every option and path checked before any heavy
import; ``--target qnn`` without a QNN SDK run again on QAIRT's x86 libraries."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

from ...errors import UsageError
from ...progress import Progress
from ...quiet import native_noise_filtered, native_stdout_filtered
from ..arguments import add_progress_flags, command_progress
from .common import (
    EXIT_OK,
    FOUR_BIT_CHOICES,
    QUANT_CHOICES,
    TARGET_CHOICES,
    add_memory_flag,
    calibration_lines,
    check_checkpoint_directory,
    check_choice,
    llm_module,
    own_warnings_as_lines,
    positive,
)


def _check_export_arguments(args: argparse.Namespace) -> None:
    """``llm export``'s options and paths, before any heavy import: every value checked that
    needs no model (the options, the calibration file, the checkpoint's config.json read for its
    family, its tokenizer's files there, ``-o`` one an export may replace)."""
    check_choice("--quant", args.quant, QUANT_CHOICES)
    check_choice("--target", args.target, TARGET_CHOICES)
    families, files = llm_module("families"), llm_module("export_files")
    if args.decoder_model_version is not None:
        check_choice("--decoder-model-version", args.decoder_model_version, tuple(families.RUNNER_VERSIONS))
    if args.target == "qnn" and args.soc is None:
        raise UsageError("--target qnn needs --soc (e.g. SM8650), the phone's chipset")
    if args.quant == "none" and (args.qat is not None or args.kv_bits != 16 or args.keep_8bit):
        option = "--qat" if args.qat is not None else "--kv-bits 8" if args.kv_bits != 16 else "--keep-8bit"
        raise UsageError(f"{option} is for a quantized export: give --quant (e.g. 16a4w_block)")
    if args.keep_8bit and args.quant not in FOUR_BIT_CHOICES:
        raise UsageError(
            f"--keep-8bit: {args.quant}'s weights are 8 bits or more already; use it with "
            f"--quant {' or '.join(FOUR_BIT_CHOICES)}"
        )
    if args.shards is not None and args.target != "qnn":
        raise UsageError("--shards splits a QNN program into contexts of layers: give --target qnn too")
    calibration_lines(args.calibration)
    checkpoint = Path(args.checkpoint)
    body = check_checkpoint_directory(args.checkpoint)
    layers = body.get("num_hidden_layers")
    if args.shards is not None and isinstance(layers, int) and args.shards > layers:
        raise UsageError(f"--shards {args.shards}: the model has {layers} layers; give 1 to {layers}")
    from ...runtime.simulator_sdk import in_simulator_environment

    notes = llm_module("checkpoint_notes")
    said = args.target == "qnn" and in_simulator_environment()  # by the process that started this one
    for kind, note in (
        ("warning", notes.vocabulary_note(checkpoint, body)),
        ("note", notes.window_note(body, args.ctx, args.decoder_model_version)),
    ):
        if note is not None and not said:
            print(f"{kind}: {note}", file=sys.stderr, flush=True)
    files.check_replaceable(Path(args.output))


def _keep_8bit(text: str) -> str | tuple[str, ...]:
    """``--keep-8bit``: ``auto``, or part names and kinds separated by commas."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r} names no part: give auto, or names such as layers.0.mlp,v_proj")
    return "auto" if names == ("auto",) else names


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage above 0 and at most 100")
    return value / 100


#: Runs of a lowering on QAIRT's x86 libraries, the first crashing, before it is given up. The
#: crashes it was made for (about one run in four under load, in QAIRT's graph preparation) had
#: a cause of ours, found and fixed: a QHPI package unloaded under the backend's registry (its
#: Makefile's ``-z nodelete``); a crash of QAIRT's own is still run again (``runtime.isolation``
#: names where).
_QAIRT_ATTEMPTS = 2


def _lowered_on_simulator_libraries(args: argparse.Namespace, progress: Progress) -> int:
    """``llm export --target qnn`` without a QNN SDK: the same command in a child process started
    with the simulator's environment (QAIRT's x86 libraries from PyPI, ExecuTorch's QNN adaptor
    over them; the loader reads ``LD_LIBRARY_PATH`` only at start); its exit status."""
    from ...runtime.isolation import run_command_reporting_crashes
    from ...runtime.simulator_sdk import SIMULATOR_QAIRT, simulator_environment

    progress(f"no QNN SDK: lowering with QAIRT {SIMULATOR_QAIRT}'s x86 libraries (installed from PyPI once)")
    environment = {**os.environ, **simulator_environment(progress=progress)}
    command = [sys.executable, "-m", "qnn_custom_ops", *args.argv]
    what = f"llm export --target qnn on QAIRT {SIMULATOR_QAIRT}'s x86 libraries"
    said = functools.partial(print, file=sys.stderr, flush=True)
    child = run_command_reporting_crashes(command, environment, what, said, attempts=_QAIRT_ATTEMPTS)
    sys.stdout.write(native_stdout_filtered(child.stdout, args.verbose))
    return child.returncode


def _cmd_export(args: argparse.Namespace) -> int:
    _check_export_arguments(args)
    import transformers

    from ...llm.checkpoint import export_checkpoint
    from ...runtime.simulator_sdk import lowers_for_qnn_here

    progress = command_progress(args, timed=True)
    if args.target == "qnn" and not lowers_for_qnn_here():
        return _lowered_on_simulator_libraries(args, progress)
    if not args.verbose:
        transformers.utils.logging.disable_progress_bar()  # "Loading weights": progress says it once
    with own_warnings_as_lines(args.verbose), native_noise_filtered(args.verbose):
        manifest = export_checkpoint(
            Path(args.checkpoint),
            Path(args.output),
            prefill_len=args.prefill,
            ctx_len=args.ctx,
            quant=args.quant,
            calibration=calibration_lines(args.calibration),
            target=args.target,
            soc=args.soc,
            progress=progress,
            decoder_model_version=args.decoder_model_version,
            qat=args.qat,
            kv_bits=args.kv_bits,
            keep_8bit=args.keep_8bit or (),
            keep_target=args.keep_target,
            max_memory=args.max_memory,
            shards=args.shards,
        )
    print(
        f"{args.output}: {manifest.model_type}, {manifest.quant}, prefill {manifest.shape.prefill_len} / "
        f"ctx {manifest.shape.ctx_len}; on a phone: qnn_llama_runner --decoder_model_version "
        f"{manifest.decoder_model_version} --tokenizer_path tokenizer.json (see docs/llm.md)"
    )
    if manifest.target == "qnn":
        print(f"here: qnn-custom-ops llm generate {args.output} runs it on QAIRT's x86 HTP simulator")
    return EXIT_OK


def add_command(actions) -> None:
    """``llm export`` and its options."""
    export = actions.add_parser(
        "export", help="a checkpoint directory -> OUT_DIR/model.pte (ExecuTorch's qnn_llama_runner contract)"
    )
    export.add_argument("checkpoint", metavar="CHECKPOINT_DIR", help="config.json, safetensors weights, tokenizer")
    export.add_argument("-o", "--output", required=True, metavar="OUT_DIR")
    export.add_argument("--prefill", type=positive, default=32, metavar="N", help="prefill tokens per call (32)")
    export.add_argument("--ctx", type=positive, default=512, metavar="N", help="context length (512)")
    export.add_argument(
        "--quant",
        default="none",
        help="none (float, the default), 8a8w, 16a8w, 16a16w, 16a4w or 16a4w_block (4-bit projections per channel, "
        "or per block of 32 input channels; lm_head and the LLM ops at 16a8w)",
    )
    export.add_argument(
        "--calibration",
        metavar="FILE",
        help="calibration text, one prompt a line (default: 8 built-in lines of varied English and code)",
    )
    export.add_argument("--target", default="host", help="host (run here, the default) or qnn (the phone)")
    export.add_argument("--soc", help="the phone's chipset for --target qnn, e.g. SM8650")
    export.add_argument(
        "--shards",
        type=positive,
        metavar="N",
        help="--target qnn: the decoder's layers in N QNN contexts per method (default: as many as keep each "
        "context's weights within 1 GiB, half QNN's 2 GiB graph limit)",
    )
    export.add_argument(
        "--decoder-model-version",
        metavar="VERSION",
        help="qnn_llama_runner's --decoder_model_version to export for (default: told from the checkpoint)",
    )
    export.add_argument(
        "--qat",
        type=positive,
        metavar="STEPS",
        help="quantization-aware training: STEPS steps of distillation from the float model on the calibration "
        "text before converting (docs/quantization.md)",
    )
    export.add_argument(
        "--kv-bits",
        type=int,
        choices=(16, 8),
        default=16,
        help="the KV caches' width: 16 (default) or 8 (a 16-bit activation mode; get_kv_io_bit_width 8)",
    )
    export.add_argument(
        "--keep-8bit",
        type=_keep_8bit,
        metavar="auto|PARTS",
        help="with 16a4w or 16a4w_block: keep these parts (llm analyze's names, or kinds such as v_proj for every "
        "layer's) at 8-bit weights; auto keeps the most sensitive until --keep-target is met (docs/quantization.md)",
    )
    export.add_argument(
        "--keep-target",
        type=_percent,
        default="97",
        metavar="PCT",
        help="--keep-8bit auto's goal: top-1 agreement with float on the calibration text, in percent (97)",
    )
    add_memory_flag(export, "a quantized host program keeps float32 weights only if folding them fits, else codes")
    add_progress_flags(export)
    export.set_defaults(handler=_cmd_export)
