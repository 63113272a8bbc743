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
