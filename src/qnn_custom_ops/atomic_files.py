"""Files written whole or not at all: staged beside their target, then renamed over.

The lowest layer: the generator writes package trees with it, the lowering writes programs,
the CLI writes configs, the runtime writes build files.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from .errors import ReportedError

#: What a file holds: its bytes, or a function writing them to a stream -- a program of several
#: GB is written piece by piece (``LoweredProgram.write_to``), never joined into one bytes first.
Contents = bytes | Callable[[BinaryIO], None]

#: The name of a file staged beside ``<name>`` (``_staged``): what a killed run leaves behind.
TEMPORARY_NAME = re.compile(r"\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.tmp\Z")


class UnsafeOutputError(ReportedError, ValueError):
    """A destination that must not be written: outside the output directory (through a symlink,
    say), or a link, directory or socket that a write would replace."""


class OutputWriteError(ReportedError, OSError):
    """The disk refused a write (full, quota, read-only); nothing was left half-written."""


def refusal_text(error: OSError) -> str:
    """Why the system refused a write, as a user reads it: ``No space left on device (ENOSPC)``."""
    return f"{error.strerror or error} ({errno.errorcode.get(error.errno or 0, 'no errno')})"


def _write_refused(path: Path, error: OSError) -> OutputWriteError:
    return OutputWriteError(
        f"{path}: cannot be written: {refusal_text(error)}; nothing was written "
        "(free some space, or choose another output)"
    )


def _writes_through(path: Path) -> bool:
    """True for a stream written in place (``/dev/stdout``, a FIFO); refuses what must never be
    replaced (a symbolic link, a directory, a socket) with ``UnsafeOutputError``."""
    if path.is_symlink():
        raise UnsafeOutputError(f"{path}: is a symbolic link; refusing to replace it (name its target, or remove it)")
    if not path.exists():
        return False
    mode = path.stat().st_mode
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    if not stat.S_ISREG(mode):
        raise UnsafeOutputError(f"{path}: is not a regular file; refusing to replace it (choose a file path)")
    return False


def _write_contents(stream: BinaryIO, data: Contents) -> None:
    if isinstance(data, bytes):
        stream.write(data)
    else:
        data(stream)


def _staged(path: Path, data: Contents) -> Path:
    """``data`` in a temporary file beside ``path`` (removed again if writing it fails)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            _write_contents(handle, data)
        os.chmod(tmp, 0o644)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _make_parents(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing ancestors; the ones created, outermost first."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()][::-1]
    for made in missing:
        made.mkdir()
    return missing


def write_all_atomic(files: Sequence[tuple[Path, Contents]]) -> None:
    """Write every file or none: each is staged beside its target first, then all are renamed
    over (a rename needs no space). A failure while staging -- a full disk -- removes what was
    staged and the directories made for it, and raises ``OutputWriteError`` naming the path and errno."""
    staged: list[tuple[Path, Path]] = []
    created: list[Path] = []
    try:
        for path, data in files:
            if _writes_through(path):
                raise UnsafeOutputError(f"{path}: is a stream, not a file of the package (choose another -o)")
            created += _make_parents(path.parent)
            staged.append((_staged(path, data), path))
    except OSError as error:
        _undo(staged, created)
        raise _write_refused(path, error) from None
    except BaseException:
        _undo(staged, created)
        raise
    for tmp, path in staged:
        os.replace(tmp, path)


def _undo(staged: list[tuple[Path, Path]], created: list[Path]) -> None:
    for tmp, _ in staged:
        tmp.unlink(missing_ok=True)
    for directory in reversed(created):
        with contextlib.suppress(OSError):
            directory.rmdir()


def write_atomic(path: Path, data: Contents) -> None:
    """Write to a temporary file beside ``path`` and rename it over: never half-written.

    Only a regular file (or none) is replaced. A character device or a pipe (``/dev/stdout``,
    ``/dev/null``, a FIFO) is written through, as the user means; anything else -- a symbolic
    link, a directory, a socket -- is refused with ``UnsafeOutputError``, never replaced. A
    write the disk refuses is ``OutputWriteError`` naming the path and errno.
    """
    try:
        if _writes_through(path):
            with path.open("wb") as stream:
                _write_contents(stream, data)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(_staged(path, data), path)
    except OSError as error:
        raise _write_refused(path, error) from None


#: ``renameat2``'s flag exchanging two paths at once (Linux 3.15; glibc 2.28).
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(first: Path, second: Path) -> bool:
    """Swap two existing paths in one step; False where the system cannot (no ``renameat2``, a
    filesystem without the flag)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def _swap_in(fresh: Path, directory: Path) -> None:
    """``fresh`` takes ``directory``'s name; what was there is removed after. Where the system
    cannot exchange the two at once, the old directory is renamed aside first (a crash between
    the renames leaves it whole, beside)."""
    if not directory.exists():
        os.rename(fresh, directory)
        return
    if _exchange(fresh, directory):
        shutil.rmtree(fresh, ignore_errors=True)  # now the old directory
        return
    aside = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.", suffix=".tmp"))
    try:
        os.rename(directory, aside)  # over the empty directory mkdtemp made
    except BaseException:
        aside.rmdir()
        raise
    try:
        os.rename(fresh, directory)
    except BaseException:
        os.rename(aside, directory)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def write_directory_atomic(directory: Path, fill: Callable[[Path], None]) -> None:
    """A directory written whole or not at all: ``fill`` writes a fresh directory beside it, which
    then takes its place in one step, so no reader sees old files beside new ones. A failure
    while filling (a full disk: ``OutputWriteError``) removes the fresh directory and leaves
    ``directory`` as it was. Whether an existing ``directory`` may be replaced is the caller's
    to decide; a symbolic link or a file there is refused (``UnsafeOutputError``)."""
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise UnsafeOutputError(f"{directory}: exists and is not a directory; refusing to replace it (choose another)")
    directory = Path(os.path.abspath(directory))  # "." or "out/..": the fresh one goes beside it, by its name
    created: list[Path] = []
    fresh: Path | None = None
    try:
        created = _make_parents(directory.parent)
        fresh = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.", suffix=".tmp"))
        fill(fresh)
        os.chmod(fresh, 0o755)
        _swap_in(fresh, directory)
    except BaseException as error:
        if fresh is not None:
            shutil.rmtree(fresh, ignore_errors=True)
        _undo([], created)
        if isinstance(error, OSError) and not isinstance(error, ReportedError):
            raise _write_refused(directory, error) from None
        raise
