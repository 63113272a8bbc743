"""Progress of a lowering, the longest step of a large model's export: each stage as it ends
(``Stages``), and, on the host, each partition XNNPACK compiles on its own (about a second each
here, hundreds of them for a 3B model's two methods): the partitions done are what the time
left is told from."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend

from ..progress import Progress, silent, time_left


class Stages:
    """Says ``lowering: <stage> in N s[; <next>]`` to ``say`` as each stage of a lowering ends."""

    def __init__(self, say: Progress) -> None:
        self.say = say
        self.started = time.monotonic()

    def ended(self, stage: str, then: str = "") -> None:
        now = time.monotonic()
        self.say(f"lowering: {stage} in {now - self.started:.1f} s" + (f"; {then}" if then else ""))
        self.started = now


#: Seconds between two progress lines (the first and last partition are always said).
EVERY_SECONDS = 15.0


class _Pace:
    """Partitions done out of the total, and when the last line was said."""

    def __init__(self, say: Progress) -> None:
        self.say = say
        self.total = 0
        self.done = 0
        self.started = time.monotonic()
        self.said_at = float("-inf")

    def one_done(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self.done in (1, self.total) or now - self.said_at >= EVERY_SECONDS:
            self.said_at = now
            left = time_left(now - self.started, self.done, self.total)
            self.say(f"lowering: {self.done} of {self.total} partitions compiled by XNNPACK{left}")


def _build_pattern_graphs() -> None:
    """XNNPACK's passes trace their pattern graphs (SDPA, bilinear upsampling) once per process,
    inside the first partition's preprocess: 6 s here, 30 times a small partition's 0.2 s, so
    the time left told from the first partition was 5-13 times too long. Built (and cached by
    XNNPACK, ``lru_cache``) before the pace is taken, the first partition's time is its own."""
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

    bilinear_2d.get_graphs_dict()
    sdpa.get_graphs()


@contextlib.contextmanager
def partitions_reported(say: Progress) -> Iterator[None]:
    """Within the block, each partition XNNPACK compiles is counted, and ``say`` hears how many
    of how many are done and the time left at the pace so far, every ``EVERY_SECONDS``
    (when nobody listens, ``silent``, XNNPACK is left as it is)."""
    if say is silent:
        yield
        return
    pace = _Pace(say)
    preprocess = XnnpackBackend.__dict__["preprocess"].__func__  # a staticmethod
    multimethod = XnnpackBackend.preprocess_multimethod.__func__
    own = {
        name: XnnpackBackend.__dict__.get(name) for name in ("preprocess", "preprocess_multimethod")
    }  # None: inherited

    def counted_multimethod(cls: type, programs: dict[str, list], compile_specs: dict[str, list]) -> Any:
        pace.total += sum(len(partitions) for partitions in programs.values())
        _build_pattern_graphs()
        pace.started = time.monotonic()
        return multimethod(cls, programs, compile_specs)

    def counted_preprocess(*args: Any, **kwargs: Any) -> Any:
        result = preprocess(*args, **kwargs)
        pace.one_done()
        return result

    XnnpackBackend.preprocess_multimethod = classmethod(counted_multimethod)
    XnnpackBackend.preprocess = staticmethod(counted_preprocess)
    try:
        yield
    finally:
        for name, value in own.items():
            if value is None:
                delattr(XnnpackBackend, name)
            else:
                setattr(XnnpackBackend, name, value)
