"""Options several commands share: ``--bind``/``--import``, ``--quiet``, a number of seconds."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


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


def add_quiet_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet", action="store_true", help="no progress lines on stderr (shown only when it is a terminal)"
    )
