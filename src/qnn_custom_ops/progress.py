"""Progress of steps longer than a few seconds (a build, the toolchain's one-time build, each
case of the Hexagon check, each stage of an LLM export): one type, ``Progress``, a callable
hearing one line per step, passed down explicitly to whatever reports. The library's long steps
default to ``silent``, so a library caller sees nothing unless it passes one; the CLI passes
lines to stderr when ``--progress``/``--quiet`` and the terminal say so (``cli.arguments``)."""

from __future__ import annotations

import sys
from collections.abc import Callable

#: What hears the progress of a long step: one line at a time, without its newline.
Progress = Callable[[str], None]


def silent(line: str) -> None:
    """A ``Progress`` that says nothing: the default of the library's long steps."""


def to_stderr(line: str) -> None:
    """A ``Progress`` printing each line on stderr as it is said (flushed: a long step shows it at once)."""
    print(line, file=sys.stderr, flush=True)


def time_left(elapsed: float, done: int, total: int) -> str:
    """``, about N s left`` at the pace so far (the steps take alike), or nothing when all are done."""
    return "" if done >= total else f", about {elapsed / done * (total - done):.0f} s left"
