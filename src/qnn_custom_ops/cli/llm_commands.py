"""``qnn-custom-ops llm export`` and ``llm generate``: a thin layer over ``llm.checkpoint``.

Progress goes to stderr, one line per step, when stderr is a terminal or with ``--progress``
(``--quiet`` silences it); generated text goes to stdout as it grows.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import json
import math
import os
import re
import statistics
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import UsageError
from ..progress import Progress
from ..quiet import native_noise_filtered, native_stdout_filtered
from .arguments import add_progress_flags, command_progress
from .process import our_warnings_one_line

EXIT_OK = 0


def _llm(name: str) -> ModuleType:
    """``llm.<name>``: the light modules (the registries, the export directory's files, the
    sampling options) import nothing heavy, and ``llm`` imports its names on first use."""
    return importlib.import_module(f"..llm.{name}", __package__)


#: ``--quant``'s names (float, and ``quantizer.QUANT_MODES``, which imports executorch; the
#: tests hold the two equal) and ``--target``'s (``checkpoint.TARGETS``): checked at once.
QUANT_CHOICES = ("none", "8a8w", "16a8w", "16a16w", "16a4w", "16a4w_block")
#: The modes with 4-bit weights (``QuantMode.kept`` set): what ``--keep-8bit`` keeps parts of at 8.
FOUR_BIT_CHOICES = ("16a4w", "16a4w_block")
TARGET_CHOICES = ("host", "qnn")


def _check_choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"{option} {value!r}: use one of {', '.join(choices)}")


def _check_export_arguments(args: argparse.Namespace) -> None:
    """``llm export``'s options and paths, before any heavy import: every value checked that
    needs no model (the options, the calibration file, the checkpoint's config.json read for its
    family, its tokenizer's files there, ``-o`` one an export may replace)."""
    _check_choice("--quant", args.quant, QUANT_CHOICES)
    _check_choice("--target", args.target, TARGET_CHOICES)
    families, files = _llm("families"), _llm("export_files")
    if args.decoder_model_version is not None:
        _check_choice("--decoder-model-version", args.decoder_model_version, tuple(families.RUNNER_VERSIONS))
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
    _calibration_lines(args.calibration)
    checkpoint = Path(args.checkpoint)
    body = _check_checkpoint_directory(args.checkpoint)
    layers = body.get("num_hidden_layers")
    if args.shards is not None and isinstance(layers, int) and args.shards > layers:
        raise UsageError(f"--shards {args.shards}: the model has {layers} layers; give 1 to {layers}")
    from ..runtime.simulator_sdk import in_simulator_environment

    notes = _llm("checkpoint_notes")
    said = args.target == "qnn" and in_simulator_environment()  # by the process that started this one
    for kind, note in (
        ("warning", notes.vocabulary_note(checkpoint, body)),
        ("note", notes.window_note(body, args.ctx, args.decoder_model_version)),
    ):
        if note is not None and not said:
            print(f"{kind}: {note}", file=sys.stderr, flush=True)
    files.check_replaceable(Path(args.output))


def _check_checkpoint_directory(directory: str) -> dict[str, Any]:
    """A checkpoint directory's config.json, read for its family (refused in one line unless
    exported), with its tokenizer's files beside it; before any heavy import."""
    checkpoint = Path(directory)
    config = checkpoint / "config.json"
    if not config.is_file():
        raise UsageError(f"{checkpoint}: no config.json; pass a Hugging Face checkpoint directory")
    checks, values = _llm("config_checks"), _llm("json_values")
    try:
        body = values.load_object(config, checks.CONFIG_LIMIT)
        model_type = values.string(values.required(body, "model_type"), "model_type")
    except values.JsonValueError as exc:
        raise UsageError(f"{config}: {exc}; fix it, or save the config again (config.save_pretrained)") from None
    _llm("families").family_of(model_type)
    checks.check_tokenizer_files(checkpoint)
    return body


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


def _check_export_directory(option: str, directory: str) -> Path:
    """An export directory: one holding a manifest (read and checked in full later)."""
    path, manifest = Path(directory), _llm("export_files").MANIFEST
    if not (path / manifest).is_file():
        raise UsageError(f"{option}{directory}: no {manifest}; pass a directory written by qnn-custom-ops llm export")
    return path


def _cmd_families(args: argparse.Namespace) -> int:
    table = _llm("family_table")
    if args.json:
        print(json.dumps(table.as_json(), indent=2))
    else:
        sys.stdout.write(table.render("markdown" if args.markdown else "text"))
    return EXIT_OK


def _own_warnings_as_lines(verbose: bool = False) -> AbstractContextManager[None]:
    """``process.our_warnings_one_line`` as the llm commands use it: the route's warnings (a dtype
    cast, a module left native, a token the runner lacks, a quantization short of its target) each
    time they are raised; third parties' (torch's, transformers') only with ``--verbose``."""
    from ..llm.checkpoint import LlmQuantWarning
    from ..llm.hf import LlmDtypeWarning
    from ..llm.runner_text import RunnerTokenWarning
    from ..llm_ops.swap import SwapWarning

    return our_warnings_one_line(
        others_shown=verbose, always=(LlmDtypeWarning, SwapWarning, RunnerTokenWarning, LlmQuantWarning)
    )


def _calibration_lines(path: str | None) -> list[str] | None:
    if path is None:
        return None
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"--calibration {path}: no such file; give a text file, one prompt a line")
    try:
        return file.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise UsageError(f"--calibration {path}: not UTF-8 text; give a text file, one prompt a line") from None


def _check_utf8(option: str, text: str) -> None:
    """Refuse an argument holding bytes that are not UTF-8 (Python keeps them as lone surrogates,
    which the tokenizer would fail on)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = ord(text[exc.start]) & 0xFF
        raise UsageError(
            f"{option}: byte 0x{byte:02x} at character {exc.start} is not UTF-8; give the text in UTF-8"
        ) from None


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
    from ..runtime.isolation import run_command_reporting_crashes
    from ..runtime.simulator_sdk import SIMULATOR_QAIRT, simulator_environment

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

    from ..llm.checkpoint import export_checkpoint
    from ..runtime.simulator_sdk import lowers_for_qnn_here

    progress = command_progress(args, timed=True)
    if args.target == "qnn" and not lowers_for_qnn_here():
        return _lowered_on_simulator_libraries(args, progress)
    if not args.verbose:
        transformers.utils.logging.disable_progress_bar()  # "Loading weights": progress says it once
    with _own_warnings_as_lines(args.verbose), native_noise_filtered(args.verbose):
        manifest = export_checkpoint(
            Path(args.checkpoint),
            Path(args.output),
            prefill_len=args.prefill,
            ctx_len=args.ctx,
            quant=args.quant,
            calibration=_calibration_lines(args.calibration),
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


@contextmanager
def _template_errors_named(export_dir: Path) -> Iterator[None]:
    """A chat template that fails (its syntax, or a ``raise_exception`` of its own) as one line
    naming the tokenizer it came from."""
    import jinja2

    try:
        yield
    except jinja2.TemplateError as exc:
        raise UsageError(
            f"{export_dir}/tokenizer: its chat template fails ({type(exc).__name__}: {exc}); fix the template, "
            "or export again"
        ) from None


#: ``--chat``'s choices (``text_generation.CHAT_TEMPLATES``; the tests hold the two equal).
CHAT_CHOICES = ("runner", "hf")


def _check_generate_arguments(args: argparse.Namespace) -> tuple[Path, Any]:
    """``llm generate``'s options and export directory, before any heavy import; the export
    directory and the sampling (a ``sampling.Sampling``)."""
    _check_utf8("--prompt", args.prompt)
    if args.chat is not None:
        _check_choice("--chat", args.chat, CHAT_CHOICES)
    sampling = _llm("sampling").Sampling(args.temperature, args.top_p, args.seed)
    return _check_export_directory("", args.export_dir), sampling


def _cmd_generate(args: argparse.Namespace) -> int:
    directory, sampling = _check_generate_arguments(args)
    from ..llm.export_targets import RUNS_ON
    from ..llm.text_generation import generate_text, load_export

    say = command_progress(args, timed=True)
    budget = _llm("memory_budget").MemoryBudget.of(args.max_memory)  # what is free before loading
    export = load_export(directory, verify=not args.no_verify, progress=say)
    if export.manifest.target == "host":
        _llm("memory_budget").check_run_fits(export.program, export.data, budget, str(directory))
    how = "" if sampling.greedy else f", sampling at temperature {sampling.temperature:g}, top-p {sampling.top_p:g}"
    runs = f"; {args.warmup} warm-up and {args.repeat} timed runs" if args.warmup or args.repeat > 1 else ""
    say(f"generating ({export.manifest.quant}{how}{runs}) {RUNS_ON[export.manifest.target].where}")

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    with native_noise_filtered(args.verbose), _template_errors_named(export.directory):
        result = generate_text(
            export,
            args.prompt,
            args.max_new_tokens,
            chat=args.chat,
            on_text=None if args.json else stream,
            sampling=sampling,
            warmup=args.warmup,
            repeat=args.repeat,
            progress=say,
        )
    if args.json:
        print(_json_text(_generation_json(args, result)))
    else:
        print()
        if args.ids:
            print(f"prompt ids: {' '.join(map(str, result.prompt_ids))}")
            print(f"ids: {' '.join(map(str, result.tokens))}")
    print(_speeds(result, args.warmup), file=sys.stderr)
    if args.chat == "hf":
        print(
            "note: --chat hf wraps the prompt in the tokenizer's chat template, not qnn_llama_runner's: the phone "
            f"formats --prompt with its own ({export.manifest.decoder_model_version}'s; --chat gives it here)",
            file=sys.stderr,
        )
    return EXIT_OK


def _spread(rates: tuple[float, ...]) -> dict[str, Any]:
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "runs": list(rates)}


def _generation_json(args: argparse.Namespace, result: Any) -> dict[str, Any]:
    """What ``--json`` prints: the text, the prompt's and the generated ids, the sampling, the speeds."""
    return {
        "text": result.text,
        "prompt_ids": list(result.prompt_ids),
        "ids": list(result.tokens),
        "sampling": {"temperature": args.temperature, "top_p": args.top_p, "seed": args.seed},
        "warmup": args.warmup,
        "repeat": args.repeat,
        "prefill_tokens_per_second": _spread(result.prefill_rates),
        "decode_tokens_per_second": _spread(result.decode_rates),
    }


def _speeds(result: Any, warmup: int) -> str:
    """The tokens/s line: one run's, or the median and spread of the timed runs."""
    if len(result.prefill_rates) == 1:
        return (
            f"prefill: {result.prompt_tokens} tokens at {result.prefill_tokens_per_second:.1f} tokens/s; "
            f"decode: {len(result.tokens)} tokens at {result.decode_tokens_per_second:.1f} tokens/s"
        )

    def spread(rates: tuple[float, ...]) -> str:
        return f"median {statistics.median(rates):.1f} tokens/s (min {min(rates):.1f}, max {max(rates):.1f})"

    return (
        f"prefill: {result.prompt_tokens} tokens at {spread(result.prefill_rates)}; decode: {len(result.tokens)} "
        f"tokens at {spread(result.decode_rates)}; {len(result.prefill_rates)} timed runs after {warmup} warm-up"
    )


def _text_file(option: str, path: str) -> str:
    """A UTF-8 text file's contents, or one line saying what is wrong with it."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{option} {path}: no such file; give a UTF-8 text file")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{option} {path}: byte {exc.start} is not UTF-8; give a UTF-8 text file") from None


#: ``--against``: an export (its manifest) or a checkpoint (its config.json), as
#: ``evaluation.REFERENCES`` tells them apart.
REFERENCE_MARKERS = ("manifest.json", "config.json")


def _cmd_eval(args: argparse.Namespace) -> int:
    directory = _check_export_directory("", args.export_dir)
    text = _text_file("--text", args.text)
    against = None if args.against is None else Path(args.against)
    if against is not None and not any((against / marker).is_file() for marker in REFERENCE_MARKERS):
        raise UsageError(
            f"--against {args.against}: neither an export (manifest.json) nor a checkpoint (config.json); pass one"
        )
    import transformers

    from ..llm.evaluation import evaluate
    from ..llm.text_generation import load_export

    if not args.verbose:
        transformers.utils.logging.disable_progress_bar()  # "Loading weights" of --against CHECKPOINT_DIR
    say = command_progress(args, timed=True)
    with _own_warnings_as_lines(args.verbose), native_noise_filtered(args.verbose):
        export = load_export(directory, verify=not args.no_verify, progress=say)
        result = evaluate(export, text, against, verify=not args.no_verify, progress=say)
    if args.json:
        print(_json_text(dataclasses.asdict(result)))
        return EXIT_OK
    print(
        f"{result.export} ({result.quant}, {result.target}): perplexity {result.perplexity:.3f} over "
        f"{result.tokens} tokens ({result.windows} windows of up to {result.window})"
    )
    other = result.against
    if other is not None:
        print(f"{other.reference} ({other.kind}): perplexity {other.perplexity:.3f}")
        print(
            f"top-1 agreement {100 * other.top1_agreement:.1f}% of {other.positions} positions; logits SQNR per "
            f"position: min {other.sqnr_min_db:.1f} dB, median {other.sqnr_median_db:.1f} dB, mean "
            f"{other.sqnr_mean_db:.1f} dB"
        )
    return EXIT_OK


def _cmd_analyze(args: argparse.Namespace) -> int:
    _check_choice("--quant", args.quant, QUANT_CHOICES[1:])
    calibration = _calibration_lines(args.calibration)
    text = None if args.text is None else _text_file("--text", args.text)
    _check_checkpoint_directory(args.checkpoint)
    import transformers

    from ..llm.analysis import analyze_checkpoint, table

    if not args.verbose:
        transformers.utils.logging.disable_progress_bar()
    say = command_progress(args, timed=True)
    with _own_warnings_as_lines(args.verbose), native_noise_filtered(args.verbose):
        result = analyze_checkpoint(Path(args.checkpoint), args.quant, calibration, text, args.prefill, args.ctx, say)
    if args.json:
        print(_json_text(dataclasses.asdict(result)))
    else:
        sys.stdout.write(table(result))
    return EXIT_OK


def _json_text(value: object) -> str:
    """``value`` as indented JSON, a list of numbers (token ids) on one line."""
    text = json.dumps(_json_ready(value), indent=2)  # a string's own newlines are escaped: "[\n" is a list's
    return re.sub(r"\[\n\s+([-\d.e+,\s]+?)\n\s*\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)


def _json_ready(value: object) -> object:
    """``value`` with every float JSON can hold: infinity (an SQNR where the logits are equal) as
    the string "inf"."""
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _whole(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return value


def _memory_gib(text: str) -> float:
    """``--max-memory``: GiB above 0 (``memory_budget.parse_gib``), one line when not."""
    try:
        return _llm("memory_budget").parse_gib(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_memory_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--max-memory",
        type=_memory_gib,
        metavar="GB",
        help=f"the memory budget in GiB: {what}; default: what is free when the command starts (MemAvailable)",
    )


def add_commands(commands) -> None:
    """``llm export`` and ``llm generate`` under the CLI's subcommands (building the parser
    imports nothing heavy: ``export_checkpoint`` checks ``--quant`` and ``--target``)."""
    llm = commands.add_parser(
        "llm", help="a Hugging Face checkpoint to the phone: list the families, export, generate, evaluate"
    )
    actions = llm.add_subparsers(dest="llm_command", required=True, metavar="ACTION")
    families = actions.add_parser(
        "families", help="the model families exported, their runner versions, RoPE types, windows, what is refused"
    )
    form = families.add_mutually_exclusive_group()
    form.add_argument("--markdown", action="store_true", help="as Markdown tables (docs/llm-commands.md holds them)")
    form.add_argument("--json", action="store_true", help="as JSON")
    families.set_defaults(handler=_cmd_families)
    export = actions.add_parser(
        "export", help="a checkpoint directory -> OUT_DIR/model.pte (ExecuTorch's qnn_llama_runner contract)"
    )
    export.add_argument("checkpoint", metavar="CHECKPOINT_DIR", help="config.json, safetensors weights, tokenizer")
    export.add_argument("-o", "--output", required=True, metavar="OUT_DIR")
    export.add_argument("--prefill", type=_positive, default=32, metavar="N", help="prefill tokens per call (32)")
    export.add_argument("--ctx", type=_positive, default=512, metavar="N", help="context length (512)")
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
        type=_positive,
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
        type=_positive,
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
    _add_memory_flag(export, "a quantized host program keeps float32 weights only if folding them fits, else codes")
    add_progress_flags(export)
    export.set_defaults(handler=_cmd_export)
    generate = actions.add_parser("generate", help="generate text from an export on the host; tokens/s")
    generate.add_argument("export_dir", metavar="OUT_DIR")
    generate.add_argument("--prompt", required=True, metavar="TEXT", help="the text to continue")
    generate.add_argument(
        "--max-new-tokens", type=_positive, default=64, metavar="N", help="tokens to generate at most (64)"
    )
    generate.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        metavar="T",
        help="0: greedy, the argmax, as qnn_llama_runner --temperature 0 (the default); above 0: sampled from "
        "softmax(logits / T), reproducible with --seed but not the phone's draws",
    )
    generate.add_argument(
        "--top-p", type=float, default=1.0, metavar="P", help="sample from the tokens whose probability reaches P (1)"
    )
    generate.add_argument("--seed", type=int, metavar="N", help="the sampling's seed (0)")
    generate.add_argument(
        "--warmup", type=_whole, default=0, metavar="N", help="untimed runs before the timed ones (0)"
    )
    generate.add_argument(
        "--repeat",
        type=_positive,
        default=1,
        metavar="N",
        help="timed runs; tokens/s are their median, with the spread (1)",
    )
    output = generate.add_mutually_exclusive_group()
    output.add_argument("--ids", action="store_true", help="print the prompt's and the generated token ids too")
    output.add_argument(
        "--json", action="store_true", help="print the text, ids, sampling and timings as JSON (nothing streamed)"
    )
    generate.add_argument(
        "--no-verify",
        action="store_true",
        help="use the export's files as they are, without checking them against its manifest (for edits on purpose)",
    )
    generate.add_argument(
        "--chat",
        nargs="?",
        const="runner",
        metavar="hf",
        help="wrap the prompt in qnn_llama_runner's template for the export's version, as the phone does "
        "(--chat hf: the tokenizer's own chat template instead)",
    )
    _add_memory_flag(generate, "a program that needs more to run is refused before it loads")
    add_progress_flags(generate)
    generate.set_defaults(handler=_cmd_generate)
    analysis = actions.add_parser(
        "analyze", help="which parts need more bits: each part quantized alone, ranked by logits SQNR against float"
    )
    analysis.add_argument("checkpoint", metavar="CHECKPOINT_DIR", help="config.json, safetensors weights, tokenizer")
    analysis.add_argument("--quant", required=True, help="the mode to analyze: 8a8w, 16a8w, 16a16w, 16a4w, 16a4w_block")
    analysis.add_argument(
        "--calibration", metavar="FILE", help="calibration text, one prompt a line (default: llm export's built-in)"
    )
    analysis.add_argument("--text", metavar="FILE", help="UTF-8 text to score on (default: the calibration text)")
    analysis.add_argument("--prefill", type=_positive, default=32, metavar="N", help="prefill tokens per call (32)")
    analysis.add_argument("--ctx", type=_positive, default=512, metavar="N", help="context length (512)")
    analysis.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    add_progress_flags(analysis)
    analysis.set_defaults(handler=_cmd_analyze)
    evaluation = actions.add_parser(
        "eval",
        help="an export's perplexity on a text; with --against, top-1 agreement and per-position logits SQNR",
    )
    evaluation.add_argument("export_dir", metavar="EXPORT_DIR")
    evaluation.add_argument(
        "--text", required=True, metavar="FILE", help="UTF-8 text, scored whole in windows the programs take"
    )
    evaluation.add_argument(
        "--against",
        metavar="OTHER_EXPORT_DIR|CHECKPOINT_DIR",
        help="a reference: another export, or the checkpoint (float32, in transformers), scored on the same tokens",
    )
    evaluation.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    evaluation.add_argument(
        "--no-verify", action="store_true", help="use the exports' files without checking them against their manifests"
    )
    add_progress_flags(evaluation)
    evaluation.set_defaults(handler=_cmd_eval)
