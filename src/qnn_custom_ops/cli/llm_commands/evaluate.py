"""``llm eval``: an export's perplexity on a text; with ``--against`` another export or the
checkpoint, top-1 agreement and per-position logits SQNR (``llm.evaluation``)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ...errors import UsageError
from ...quiet import native_noise_filtered
from ..arguments import add_progress_flags, command_progress
from .common import EXIT_OK, check_export_directory, json_text, own_warnings_as_lines, text_file

#: ``--against``: an export (its manifest) or a checkpoint (its config.json), as
#: ``evaluation.REFERENCES`` tells them apart.
REFERENCE_MARKERS = ("manifest.json", "config.json")


def _cmd_eval(args: argparse.Namespace) -> int:
    directory = check_export_directory("", args.export_dir)
    text = text_file("--text", args.text)
    against = None if args.against is None else Path(args.against)
    if against is not None and not any((against / marker).is_file() for marker in REFERENCE_MARKERS):
        raise UsageError(
            f"--against {args.against}: neither an export (manifest.json) nor a checkpoint (config.json); pass one"
        )
    import transformers

    from ...llm.evaluation import evaluate
    from ...llm.text_generation import load_export

    if not args.verbose:
        transformers.utils.logging.disable_progress_bar()  # "Loading weights" of --against CHECKPOINT_DIR
    say = command_progress(args, timed=True)
    with own_warnings_as_lines(args.verbose), native_noise_filtered(args.verbose):
        export = load_export(directory, verify=not args.no_verify, progress=say)
        result = evaluate(export, text, against, verify=not args.no_verify, progress=say)
    if args.json:
        print(json_text(dataclasses.asdict(result)))
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


def add_command(actions) -> None:
    """``llm eval`` and its options."""
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
