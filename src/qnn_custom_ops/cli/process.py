"""How every command runs: exit codes, one line per error (no traceback unless QCO_DEBUG=1;
argparse's refusals too, ``OneLineParser``), our warnings as one line each, standard output's
refusals named, and SIGTERM/SIGHUP ending the command through its ``finally`` blocks."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TextIO, cast

from ..atomic_files import refusal_text
from ..errors import ReportedError
from ..opdef import OpDefError

EXIT_OK, EXIT_INTERNAL, EXIT_INVALID, EXIT_MISMATCH = 0, 1, 2, 3


class OneLineParser(argparse.ArgumentParser):
    """A parser whose mistakes are one line naming the command and where its options are listed
    (argparse prints its usage first); exit status 2, as argparse's. Every parser of the CLI is
    one: ``add_subparsers`` makes its subcommands' parsers of the class of the parser it is called
    on (its ``parser_class``), so the top-level one is enough."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message}; see {self.prog} --help", file=sys.stderr)
        sys.exit(EXIT_INVALID)

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        """``ArgumentParser.parse_known_args``, an argument no parser takes refused by the command
        it was given to: argparse leaves it to the top-level parser, whose line names no command
        and whose ``--help`` lists none of the command's options."""
        parsed, unknown = super().parse_known_args(*args, **kwargs)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed, unknown


@contextlib.contextmanager
def our_warnings_one_line(others_shown: bool = True, always: tuple[type[Warning], ...] = ()) -> Iterator[None]:
    """Our warnings (every category defined in qnn_custom_ops) as the one line each was written as
    (``warning: ...``), printed as they are raised (a bf16 cast as the checkpoint loads, not after
    the export is written), not with the file, line and source of the code that warned, which are
    ours, not the user's; the ``always`` categories each time they are raised. Third parties'
    warnings as Python shows them, or not at all when ``others_shown`` is False (the ``llm``
    commands: torch's and transformers' chatter, shown with ``--verbose``)."""
    with warnings.catch_warnings():
        show = warnings.showwarning

        def show_ours_plainly(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if category.__module__.split(".")[0] == __name__.split(".")[0]:  # qnn_custom_ops
                print(f"warning: {message}", file=sys.stderr, flush=True)
            elif others_shown:
                show(message, category, *args, **kwargs)

        warnings.showwarning = show_ours_plainly
        for category in always:
            warnings.simplefilter("always", category)
        yield


class StdoutWriteError(ReportedError, OSError):
    """Standard output refused a write (``>/dev/full``, a full disk, a closed pipe)."""


class _RefusalsNamed:
    """Standard output whose refused writes say so (``StdoutWriteError``): print's bare OSError
    would read as an internal error."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._guarded(lambda: self._stream.write(text))

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    @staticmethod
    def _guarded(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except OSError as exc:
            raise StdoutWriteError(
                f"standard output: cannot be written: {refusal_text(exc)} (free some space, or send it elsewhere)"
            ) from exc


class _Closed:
    """Standard output of a command started with it closed (``>&-``), where Python has none:
    its first write says so."""

    def write(self, text: str) -> int:
        raise StdoutWriteError(
            "standard output: closed (started with >&-), so nothing can be printed; give it somewhere to write "
            "(> FILE, or > /dev/null)"
        )

    def flush(self) -> None:
        """Nothing is held."""


@contextlib.contextmanager
def _stdout_refusals_named() -> Iterator[None]:
    """Standard output as ``_RefusalsNamed`` inside the block, flushed before it ends: what is
    still buffered fails here, not in the interpreter's last flush."""
    stdout = sys.stdout
    sys.stdout = cast(TextIO, _RefusalsNamed(stdout) if stdout is not None else _Closed())
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = stdout


def _discard_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so the interpreter's exit flush of what stdout
    still holds cannot fail again with a second report."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no descriptor (a captured or closed stream)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class Terminated(BaseException):
    """A signal (SIGTERM, SIGHUP) asked the command to end: raised where it runs, as Ctrl-C's
    KeyboardInterrupt is, so every ``finally`` runs first (an emulator or an isolated child
    killed, temporary directories removed)."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


def _raise_terminated(number: int, frame: object) -> None:
    raise Terminated(number)


@contextlib.contextmanager
def signals_end_the_command() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Terminated`` inside the block (their default ends the process
    at once, leaving its children running and its temporary files behind)."""
    numbers = (signal.SIGTERM, signal.SIGHUP)
    previous = [signal.signal(number, _raise_terminated) for number in numbers]
    try:
        yield
    finally:
        for number, handler in zip(numbers, previous):
            signal.signal(number, handler)


def _hold_closed_stdout() -> None:
    """With standard output closed (``>&-``), descriptor 1 would be the next file opened -- a
    program being written, say -- and native code's prints would land in it: hold it on
    /dev/null (our own writes still say standard output is closed)."""
    if sys.stdout is not None:
        return
    try:
        os.fstat(1)
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != 1:
            os.dup2(devnull, 1)
            os.close(devnull)


def run_handler(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    _hold_closed_stdout()
    try:
        with our_warnings_one_line(), _stdout_refusals_named():
            return handler(args)
    except StdoutWriteError as exc:
        if not isinstance(exc.__cause__, BrokenPipeError):  # a reader that stopped (| head) wants no more
            print(f"error: {exc}", file=sys.stderr)
        _discard_stdout()
        return EXIT_INVALID
    except OpDefError as exc:
        for diagnostic in exc.diagnostics:
            print(diagnostic, file=sys.stderr)
        return EXIT_INVALID
    except ReportedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except Terminated as exc:
        from ..runtime.isolation import signal_name

        print(f"terminated ({signal_name(exc.number)})", file=sys.stderr)
        return 128 + exc.number
    except Exception as exc:  # the last line of defence: one line, not a traceback
        if os.environ.get("QCO_DEBUG"):
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (rerun with QCO_DEBUG=1 and report it)", file=sys.stderr)
        return EXIT_INTERNAL
