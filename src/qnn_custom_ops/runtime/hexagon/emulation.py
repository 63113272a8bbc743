"""The driver run under qemu-hexagon: its log of executed blocks counted, as it streams, into
packets per kernel call (``PacketCounter``), each case under a time limit, and a run that fails
told in one line naming the op and what to do."""

from __future__ import annotations

import re
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...progress import Progress, silent
from ..cost import KernelCase
from ..isolation import ending_with_parent, signal_name
from .driver import decode_results, encode_cases
from .toolchain import QEMU_CPU, HexagonToolError, emulator


@dataclass(frozen=True)
class HexagonRun:
    results: list[tuple[int, list[np.ndarray], bool]]  # status, outputs, whether it prepared anything ahead
    packets: list[int]  # executed packets of each case's kernel call
    prepare_packets: list[int]  # of what each case's kernel prepares ahead (its <Op>Prepare; 0 without one)


#: A case's time limit under the emulator (which logs every executed block): a fixed allowance
#: (starting qemu, translating the program, reading the case) and a time per element of its
#: tensors, a few times what the slowest shipped kernel takes; ``time_limit`` replaces both.
CASE_SECONDS = 30.0
ELEMENT_SECONDS = 2e-3


def case_time_limit(case: KernelCase) -> float:
    """Seconds ``case`` may take under the emulator before it is taken for a kernel that never returns."""
    return CASE_SECONDS + ELEMENT_SECONDS * sum(t.array.size for t in (*case.outputs, *case.inputs, *case.params))


def run_on_hexagon(
    program: Path,
    cases: Sequence[KernelCase],
    ops: Sequence[str],
    time_limit: float | None = None,
    progress: Progress = silent,
) -> HexagonRun:
    """Run the cases under qemu-hexagon, its log of every executed translation block counted as
    it streams (never stored), and count the packets executed between each call's begin and end
    marks. A case past its time limit (``case_time_limit``, or ``time_limit`` seconds) ends
    the emulator; so does this process's end. Each case is said to ``progress`` as it ends."""
    limits = [time_limit or case_time_limit(case) for case in cases]
    with tempfile.TemporaryDirectory(prefix="qco-hexagon-") as tmp:
        work = Path(tmp)
        (work / "cases").write_bytes(encode_cases(cases, ops))
        command = [emulator(), "-cpu", QEMU_CPU, "-d", "in_asm,exec,nochain"]
        counter = PacketCounter()
        returncode, expired = _emulate(
            [*command, str(program), str(work / "cases"), str(work / "results")], counter, limits, progress
        )
        failure = _failure(returncode, expired, counter, cases, limits)
        if failure:
            raise HexagonToolError(failure)
        results = (work / "results").read_bytes() if (work / "results").is_file() else b""
        decoded = decode_results(results, cases)
        prepared = [count if ran else 0 for count, (_, _, ran) in zip(counter.prepare_packets, decoded)]
        return HexagonRun(decoded, counter.packets, prepared)


def _emulate(
    command: list[str], counter: PacketCounter, limits: Sequence[float], progress: Progress
) -> tuple[int, bool]:
    """Run ``command``, its standard error (qemu's log, the program's and qemu's own lines) fed to
    ``counter`` line by line; killed when a case outlives its limit. (exit status, killed for time)."""
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=ending_with_parent(),
        )
    except OSError as exc:
        raise HexagonToolError(
            f"{command[0]}: cannot be run ({exc.strerror}): reinstall it (apt-get install qemu-user)"
        ) from exc
    done, expired, reported = threading.Event(), threading.Event(), 0
    watchdog = threading.Thread(target=_watch, args=(process, counter, limits, done, expired), daemon=True)
    watchdog.start()
    try:
        assert process.stderr is not None
        for line in process.stderr:
            counter.feed(line)
            if counter.ended > reported:
                reported = counter.ended
                progress(f"hexagon: {reported} of {len(limits)} case(s) run under qemu-hexagon")
        process.wait()
    finally:
        done.set()
        process.kill()  # still running only if this process is being interrupted
        process.wait()
        watchdog.join()
    return process.returncode, expired.is_set()


def _watch(
    process: subprocess.Popen,
    counter: PacketCounter,
    limits: Sequence[float],
    done: threading.Event,
    expired: threading.Event,
) -> None:
    """Kill ``process`` when the case it is on (the one after the last ended) outlives its limit;
    each case's clock starts when the one before it ends, so reading a case counts too."""
    case, deadline = 0, time.monotonic() + (limits[0] if limits else CASE_SECONDS)
    while not done.wait(0.1):
        if counter.ended > case:
            case = counter.ended
            deadline = time.monotonic() + (limits[case] if case < len(limits) else CASE_SECONDS)
        elif time.monotonic() > deadline:
            expired.set()
            process.kill()
            return


def _failure(
    returncode: int, expired: bool, counter: PacketCounter, cases: Sequence[KernelCase], limits: Sequence[float]
) -> str:
    """What went wrong with the emulator's run, as one line naming the op and what to do; "" if nothing."""
    case = cases[counter.ended] if counter.ended < len(cases) else None
    where = f"kernel {case.op} ({case.label})" if case else "the Hexagon driver"
    inside = counter.inside  # a kernel call (or its preparation) begun and not ended
    said = "; ".join(counter.other)[-300:]
    if expired:
        limit = limits[counter.ended] if case else CASE_SECONDS
        return (
            f"{where} did not return within {limit:.0f} s under qemu-hexagon: an endless loop? "
            "(give it longer with --time-limit SECONDS)"
        )
    if returncode < 0:
        return f"{where} crashed on Hexagon (qemu-hexagon): {signal_name(-returncode)}" + (
            "; a C++ exception thrown on Hexagon ends this way too (catch it in the kernel)" if inside else f": {said}"
        )
    if inside:
        return (
            f"{where} ended the Hexagon program with exit status {returncode}: a kernel returns a "
            "status, it does not call exit()"
        )
    if returncode != 0:
        return f"the Hexagon program failed under qemu-hexagon (exit {returncode}): {said}"
    if counter.ended < len(cases):
        return (
            f"{emulator()} exited 0 having run {counter.ended} of {len(cases)} case(s): it is no working "
            "qemu-hexagon (apt-get install qemu-user)"
        )
    return ""


_IN = re.compile(rb"^IN: (\S*)")
_INSTRUCTION = re.compile(rb"^0x([0-9a-f]{8}):\s+0x[0-9a-f]{8}\s+(\{)?")
_EXEC = re.compile(rb"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")
_BEGIN, _END = b"qco_call_begin", b"qco_call_end"
_PREPARE_BEGIN, _PREPARE_END = b"qco_prepare_begin", b"qco_prepare_end"
_MARKS = (_BEGIN, _END, _PREPARE_BEGIN, _PREPARE_END)


class PacketCounter:
    """Per window between an execution of ``qco_call_begin`` and the next of ``qco_call_end``
    (and apart, per window of ``qco_prepare_begin`` and ``qco_prepare_end``): executed packets
    (each translation block's packets, from ``in_asm``, times its executions), counted line by
    line as qemu's log streams. What is kept: each block's packet count, the marks' addresses
    (from the blocks' symbol names) and the last lines that are not the log's."""

    def __init__(self) -> None:
        self.packets: list[int] = []  # one per window begun
        self.prepare_packets: list[int] = []  # one per prepare window begun
        self.ended = 0  # windows ended
        self.other: deque[str] = deque(maxlen=5)  # the program's and qemu's own last lines
        self._sizes: dict[int, int] = {}
        self._marks: dict[int, bytes] = {}
        self._name, self._start = b"", -1
        self._counting: list[int] | None = None  # the list whose last window is open

    def feed(self, line: bytes) -> None:
        executed = _EXEC.match(line)
        if executed:
            self._executed(int(executed[1], 16))
            return
        instruction = _INSTRUCTION.match(line)
        if instruction:
            if self._start < 0:
                self._start = int(instruction[1], 16)
                self._sizes[self._start] = 0
                if self._name in _MARKS:
                    self._marks[self._start] = self._name
            self._sizes[self._start] += bool(instruction[2])
            return
        block = _IN.match(line)
        if block:
            self._name, self._start = block[1], -1
        elif line.strip() and not line.startswith(b"----"):
            self.other.append(line.decode("utf-8", "replace").strip())

    @property
    def inside(self) -> bool:
        """A window begun and not ended: the program stopped inside a kernel's call or preparation."""
        return self._counting is not None

    def _executed(self, pc: int) -> None:
        mark = self._marks.get(pc)
        if mark in (_BEGIN, _PREPARE_BEGIN):
            self._counting = self.packets if mark == _BEGIN else self.prepare_packets
            self._counting.append(0)
        elif mark in (_END, _PREPARE_END):
            self._counting = None
            self.ended += mark == _END
        elif self._counting is not None:
            self._counting[-1] += self._sizes.get(pc, 0)
