"""``llm generate``: text from an export on the host (or QAIRT's x86 HTP simulator for a QNN export),
streamed to stdout as it grows; tokens/s on stderr, or everything as JSON."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ...quiet import native_noise_filtered
from ..arguments import add_progress_flags, command_progress
from .common import (
    EXIT_OK,
    add_memory_flag,
    check_choice,
    check_export_directory,
    json_text,
    llm_module,
    positive,
    whole,
)


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
        check_choice("--chat", args.chat, CHAT_CHOICES)
    sampling = llm_module("sampling").Sampling(args.temperature, args.top_p, args.seed)
    return check_export_directory("", args.export_dir), sampling


def _cmd_generate(args: argparse.Namespace) -> int:
    directory, sampling = _check_generate_arguments(args)
    from ...llm.export_targets import RUNS_ON
    from ...llm.text_generation import generate_text, load_export

    say = command_progress(args, timed=True)
    budget = llm_module("memory_budget").MemoryBudget.of(args.max_memory)  # what is free before loading
    export = load_export(directory, verify=not args.no_verify, progress=say)
    if export.manifest.target == "host":
        llm_module("memory_budget").check_run_fits(export.program, export.data, budget, str(directory))
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
        print(json_text(_generation_json(args, result)))
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


def add_command(actions) -> None:
    """``llm generate`` and its options."""
    generate = actions.add_parser("generate", help="generate text from an export on the host; tokens/s")
    generate.add_argument("export_dir", metavar="OUT_DIR")
    generate.add_argument("--prompt", required=True, metavar="TEXT", help="the text to continue")
    generate.add_argument(
        "--max-new-tokens", type=positive, default=64, metavar="N", help="tokens to generate at most (64)"
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
    generate.add_argument("--warmup", type=whole, default=0, metavar="N", help="untimed runs before the timed ones (0)")
    generate.add_argument(
        "--repeat",
        type=positive,
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
    add_memory_flag(generate, "a program that needs more to run is refused before it loads")
    add_progress_flags(generate)
    generate.set_defaults(handler=_cmd_generate)
