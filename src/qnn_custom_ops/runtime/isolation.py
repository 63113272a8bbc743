"""Run a call in a child process, so a kernel that crashes is reported instead of killing Python.

A kernel under development may segfault or abort; in-process, that ends the user's
interpreter with no message. ``call_isolated`` runs the call in a fresh Python process (not a
fork: a forked child of a process running thread pools can hang), passes arguments and the
result by pickle, and turns a death by signal into ``KernelCrashError``. The C ABI of every
host library loaded in the child writes the name of the op it is running into a page shared
with the parent (``qco_<Pkg>_trace_into``), so the report names the kernel that crashed.
"""

from __future__ import annotations

import ctypes
import faulthandler
import logging
import mmap
import os
import pickle
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ReportedError

TRACE_SIZE = 256
_CALL, _RESULT, _TRACE_FILE = "call.pickle", "result.pickle", "trace"
#: The shared page: the running op's name, then the step's deadline and limit (two doubles,
#: ``time.monotonic`` seconds, which every process of the machine shares; 0: none).
_LIMITS = struct.Struct("<dd")
# In an isolated child: the page shared with the parent, and a ctypes char over it.
_TRACE: tuple[mmap.mmap, ctypes.c_char] | None = None
#: Set for a command run by ``run_command_reporting_crashes``: the file its Python stack goes to on a crash.
FAULT_LOG = "QCO_FAULT_LOG"


class KernelCrashError(ReportedError, RuntimeError):
    """An isolated call died (a kernel crashed, or exited early) or was stopped past its time limit."""


def call_isolated(function: Callable[..., Any], *args: Any, what: str) -> Any:
    """``function(*args)`` in a child Python process; its result, or its exception re-raised.

    ``function`` must be importable by name (a module-level function). ``what`` names the call
    in the crash report when no kernel was running ("the program", "kernel RmsNorm"). The child
    ends with this process; a step it began with ``set_time_limit(seconds)`` and that outlives it is
    stopped.
    """
    with tempfile.TemporaryDirectory(prefix="qco-isolated-") as tmp:
        work = Path(tmp)
        quiet = logging.root.manager.disable >= logging.WARNING  # the caller silenced third-party noise
        # the flag first: the child silences noise before unpickling the call imports torch
        (work / _CALL).write_bytes(pickle.dumps(quiet) + pickle.dumps((function, args)))
        (work / _TRACE_FILE).write_bytes(bytes(TRACE_SIZE + _LIMITS.size))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, sys.path))}
        child = f"import sys; from {__name__} import run_child; run_child(sys.argv[1], int(sys.argv[2]))"
        command = [sys.executable, "-c", child, tmp, str(os.getpid())]
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, env=env)
        try:
            returncode, limit = _wait(process, work / _TRACE_FILE)
        finally:
            process.kill()  # still running only if this process is being interrupted
            process.wait()
        running = (work / _TRACE_FILE).read_bytes()[:TRACE_SIZE].split(b"\0", 1)[0].decode("utf-8", "replace")
        culprit = f"kernel {running}" if running else what
        if limit:
            raise KernelCrashError(
                f"{culprit} did not return within its time limit of {limit:.0f} s in an isolated process: "
                "an endless loop? (give it longer with --time-limit SECONDS)"
            )
        if returncode < 0:
            raise KernelCrashError(
                f"{culprit} crashed: {signal_name(-returncode)} (run in an isolated process; "
                "the kernel's own output, if any, is above)"
            )
        if not (work / _RESULT).is_file():
            raise KernelCrashError(
                f"{culprit} ended its isolated process with exit status {returncode} before "
                "returning (a kernel calling exit()?)"
            )
        outcome, value = pickle.loads((work / _RESULT).read_bytes())
    if outcome == "error":
        raise _rebuilt(*value)
    return value


def run_command_reporting_crashes(
    command: list[str], env: dict[str, str], what: str, said: Callable[[str], None], attempts: int = 1
) -> subprocess.CompletedProcess:
    """``command`` (one of ours: it calls ``faults_logged`` at start) run to its end, its standard
    output captured; a death by signal raised as ``KernelCrashError`` naming the Python function the
    crash happened under, never returned as a bare negative status. A crash (``CRASHES``) with
    ``attempts`` left runs the command again, ``said`` so: for native code of others that crashes
    now and then (QAIRT's), never for a process killed or stopped."""
    attempt = 1
    while True:
        child, site = _run_with_fault_log(command, env)
        if child.returncode >= 0:
            return child
        killed = " (killed: out of memory?)" if child.returncode == -signal.SIGKILL else ""
        crash = f"{what} crashed: {signal_name(-child.returncode)}{killed}{site}"
        if attempt == attempts or -child.returncode not in CRASHES:
            raise KernelCrashError(crash)
        attempt += 1
        said(f"warning: {crash}; running it again ({attempt} of {attempts})")


def _run_with_fault_log(command: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, str]:
    """The command run, and where it crashed (``_crash_site``; '' when it did not)."""
    with tempfile.TemporaryDirectory(prefix="qco-command-") as tmp:
        log = Path(tmp) / "faults"
        child = subprocess.run(command, env={**env, FAULT_LOG: str(log)}, stdout=subprocess.PIPE, text=True)
        return child, _crash_site(log.read_text(errors="replace") if log.is_file() else "")


#: The signals of a process that crashed, rather than one killed or stopped from outside.
CRASHES = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE})


def faults_logged() -> None:
    """In a command started by ``run_command_reporting_crashes``: a fatal signal writes the Python
    stack into the file the parent named (faulthandler holds it open for the process's life)."""
    path = os.environ.get(FAULT_LOG)
    if path:
        faulthandler.enable(open(path, "w"), all_threads=False)  # noqa: SIM115


def _crash_site(log: str) -> str:
    """`` in <function> (<file>:<line>)``: the innermost Python frame faulthandler wrote, or ''."""
    frame = re.search(r'File "([^"]+)", line (\d+) in (\S+)', log)
    return f" in {frame[3]} ({Path(frame[1]).name}:{frame[2]})" if frame else ""


def _wait(process: subprocess.Popen, trace: Path) -> tuple[int, float]:
    """(exit status, 0) once ``process`` ends, or (its status, the limit) once it is killed for
    outliving the deadline its current step set."""
    while True:
        try:
            return process.wait(timeout=0.1), 0.0
        except subprocess.TimeoutExpired:
            deadline, limit = _LIMITS.unpack_from(trace.read_bytes(), TRACE_SIZE)
            if deadline and time.monotonic() > deadline:
                process.kill()
                return process.wait(), limit


def set_time_limit(seconds: float) -> None:
    """In an isolated child, give the step that begins now ``seconds``: past them the parent
    kills the child and names the op running. Elsewhere nothing can stop a call that never
    returns, and this does nothing."""
    if _TRACE is not None:
        _LIMITS.pack_into(_TRACE[0], TRACE_SIZE, time.monotonic() + seconds, seconds)


_PR_SET_PDEATHSIG = 1


def ending_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` that has the kernel SIGKILL the child when its parent dies: a parent
    killed outright runs no cleanup, and an emulator or a kernel left looping would go on at
    100 % of a core. libc is looked up here, in the parent: the forked child only calls."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _rebuilt(error_type: type[BaseException], message: str) -> BaseException:
    """The child's exception as its own type with its message (its constructor's arguments are
    not always its message, so it is not re-constructed)."""
    error = error_type.__new__(error_type)
    error.args = (message,)
    return error


def trace_into(trace_function: Any) -> None:
    """In an isolated child, hand a loaded library's ``qco_<Pkg>_trace_into`` the shared page."""
    if _TRACE is not None:
        trace_function.argtypes = (ctypes.c_void_p, ctypes.c_int32)
        trace_function(ctypes.addressof(_TRACE[1]), TRACE_SIZE)


def run_child(directory: str, parent: int) -> None:
    """The child's side: run the pickled call; write its result or its exception for the parent."""
    global _TRACE
    ending_with_parent()()
    if os.getppid() != parent:  # the parent died before the line above
        sys.exit(1)
    work = Path(directory)
    with open(work / _TRACE_FILE, "r+b") as handle:
        page = mmap.mmap(handle.fileno(), TRACE_SIZE + _LIMITS.size)
    _TRACE = (page, ctypes.c_char.from_buffer(page))
    with open(work / _CALL, "rb") as call:
        if pickle.load(call):
            from ..quiet import quiet_third_party

            quiet_third_party()
        function, args = pickle.load(call)
    try:
        outcome = ("ok", function(*args))
    except Exception as exc:  # every failure goes back to the caller, as its own type
        outcome = ("error", (type(exc), str(exc)))
    (work / _RESULT).write_bytes(pickle.dumps(outcome))
