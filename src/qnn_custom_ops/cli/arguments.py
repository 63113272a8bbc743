"""Options several commands share: ``--bind``/``--import``, ``--progress``/``--quiet`` (and the one
``Progress`` they make), a number of seconds."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable

from ..progress import Progress, silent, to_stderr


def add_binding_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="QnnOp=NS::OP",
        help="bind a QNN op of the package to a torch op (repeatable)",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="module that registers the torch ops (repeatable; the current directory is searched)",
    )


def seconds_up_to(upper: float) -> Callable[[str], float]:
    """An argument type: a finite number of seconds in (0, upper]."""

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 < value <= upper:  # false for nan too
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in (0, {upper:g}]")
        return value

    return seconds


def add_progress_flags(parser: argparse.ArgumentParser) -> None:
    """``--progress`` or ``--quiet``: every long command takes the same two."""
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--progress", action="store_true", help="progress lines on stderr even when not a terminal")
    shown.add_argument("--quiet", action="store_true", help="no progress lines")


def progress_shown(args: argparse.Namespace) -> bool:
    """Progress lines on stderr: with ``--progress``, or when stderr is a terminal, never with
    ``--quiet`` (a command without the flags: when stderr is a terminal)."""
    return not getattr(args, "quiet", False) and (getattr(args, "progress", False) or sys.stderr.isatty())


def command_progress(args: argparse.Namespace, timed: bool = False) -> Progress:
    """The one ``Progress`` a command passes to what it calls: ``silent`` unless ``progress_shown``,
    else each line on stderr; ``timed`` (the ``llm`` commands, whose steps run for minutes) puts
    the seconds since this call before each line."""
    if not progress_shown(args):
        return silent
    if not timed:
        return to_stderr
    started = time.monotonic()

    def said_with_time(line: str) -> None:
        to_stderr(f"[{time.monotonic() - started:6.1f}s] {line}")

    return said_with_time
