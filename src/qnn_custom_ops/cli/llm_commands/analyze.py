"""``llm analyze``: which parts of a checkpoint need more bits, each part quantized alone and ranked
by its logits SQNR against float (``llm.analysis``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from ...quiet import native_noise_filtered
from ..arguments import add_progress_flags, command_progress
from .common import (
    EXIT_OK,
    QUANT_CHOICES,
    calibration_lines,
    check_checkpoint_directory,
    check_choice,
    json_text,
    own_warnings_as_lines,
    positive,
    text_file,
)


def _cmd_analyze(args: argparse.Namespace) -> int:
    check_choice("--quant", args.quant, QUANT_CHOICES[1:])
    calibration = calibration_lines(args.calibration)
    text = None if args.text is None else text_file("--text", args.text)
    check_checkpoint_directory(args.checkpoint)
    import transformers

    from ...llm.analysis import analyze_checkpoint, table

    if not args.verbose:
        transformers.utils.logging.disable_progress_bar()
    say = command_progress(args, timed=True)
    with own_warnings_as_lines(args.verbose), native_noise_filtered(args.verbose):
        result = analyze_checkpoint(Path(args.checkpoint), args.quant, calibration, text, args.prefill, args.ctx, say)
    if args.json:
        print(json_text(dataclasses.asdict(result)))
    else:
        sys.stdout.write(table(result))
    return EXIT_OK


def add_command(actions) -> None:
    """``llm analyze`` and its options."""
    analysis = actions.add_parser(
        "analyze", help="which parts need more bits: each part quantized alone, ranked by logits SQNR against float"
    )
    analysis.add_argument("checkpoint", metavar="CHECKPOINT_DIR", help="config.json, safetensors weights, tokenizer")
    analysis.add_argument("--quant", required=True, help="the mode to analyze: 8a8w, 16a8w, 16a16w, 16a4w, 16a4w_block")
    analysis.add_argument(
        "--calibration", metavar="FILE", help="calibration text, one prompt a line (default: llm export's built-in)"
    )
    analysis.add_argument("--text", metavar="FILE", help="UTF-8 text to score on (default: the calibration text)")
    analysis.add_argument("--prefill", type=positive, default=32, metavar="N", help="prefill tokens per call (32)")
    analysis.add_argument("--ctx", type=positive, default=512, metavar="N", help="context length (512)")
    analysis.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    add_progress_flags(analysis)
    analysis.set_defaults(handler=_cmd_analyze)
