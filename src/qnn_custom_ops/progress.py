"""Progress of steps longer than a few seconds (a build, the toolchain's one-time build, each
case of the Hexagon check): one line each on stderr, shown only when the CLI turns them on
(stderr a terminal, no ``--quiet``); a library caller sees nothing unless it does too."""

from __future__ import annotations

import sys

_shown = False


def show_progress(shown: bool) -> None:
    """Turn progress lines on or off for this process."""
    global _shown
    _shown = shown


def progress(text: str) -> None:
    """Say ``text``, one line on stderr, when progress lines are on."""
    if _shown:
        print(text, file=sys.stderr, flush=True)


def time_left(elapsed: float, done: int, total: int) -> str:
    """``, about N s left`` at the pace so far (the steps take alike), or nothing when all are done."""
    return "" if done >= total else f", about {elapsed / done * (total - done):.0f} s left"


def silent(line: str) -> None:
    """A ``progress`` callable that says nothing: the default of the library's long steps."""
