"""Put a rendered package on disk: plan first, then atomic writes, never outside ``-o``."""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ReportedError
from .render import PlannedFile

# Where user-owned files live, to find ones whose op left the config.
_USER_GLOBS = ("src/ops/*.cpp", "kernels/*.h")
# What we last wrote to each user-owned file (sha256 of the content and of its signature, path):
# an unchanged file is ours to update; an edited one whose signature changed is reported.
MANIFEST = ".qco-generated"
# ``write_atomic``'s temporary name for ``name``: ``.name.XXXXXXXX.tmp``.
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.tmp\Z")


class Action(str, enum.Enum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"
    KEEP = "keep"  # a user-owned file differs from the template: the user's edits stay
    OVERWRITE = "overwrite"  # a user-owned file replaced because of --force
    STALE = "stale"  # the op left the config; reported, never deleted


@dataclass(frozen=True)
class Step:
    action: Action
    path: Path
    note: str = ""

    def __str__(self) -> str:
        note = f"  ({self.note})" if self.note else ""
        return f"{self.action.value:9} {self.path}{note}"

    @property
    def writes(self) -> bool:
        return self.action in (Action.CREATE, Action.UPDATE, Action.OVERWRITE)


class UnsafeOutputError(ReportedError, ValueError):
    """A target would land outside the output directory (through a symlink, say)."""


class SignatureChangedError(ReportedError, ValueError):
    """A file you edited no longer declares what the OpDef now needs; nothing was written."""


def plan_steps(root: Path, out_dir: Path, files: list[PlannedFile], force: bool) -> list[Step]:
    """What writing ``files`` under ``root`` would do; reads the disk, writes nothing."""
    boundary = out_dir.resolve()
    generated = read_manifest(root)
    records = [generated.get(f.path.as_posix(), ("", "")) for f in files]
    steps = [_step_for(root / f.path, f, force, boundary, record[0]) for f, record in zip(files, records)]
    stale_signatures = [
        (step, f)
        for step, f, record in zip(steps, files, records)
        if step.action is Action.KEEP
        and record[1]
        and record[1] != _signature_digest(f)
        and not _declares(step.path, f.signature)
    ]
    if stale_signatures:
        raise SignatureChangedError(
            "\n".join(
                f"{step.path}: edited by you, and the OpDef changed what it must declare; nothing was written. "
                f"Change its declaration to: {f.signature}  (or regenerate it with --force)"
                for step, f in stale_signatures
            )
        )
    return steps + _stale_steps(root, {root / f.path for f in files}, generated)


def _stale_steps(root: Path, planned: set[Path], generated: Mapping[str, tuple[str, str]]) -> list[Step]:
    """Files we generated for an op that left the config, and configs that are no longer the
    package's: reported, never deleted. Headers of your own (helpers beside the kernels) are not ours."""
    ours = sorted(root / name for name in generated if any(Path(name).match(g) for g in _USER_GLOBS))
    stale = [
        Step(Action.STALE, path, "its op is no longer in the config; not deleted")
        for path in ours
        if path not in planned and path.exists()
    ]
    stale += [
        Step(Action.STALE, path, "not a config of this package; not deleted, the Makefile ignores it")
        for path in sorted(root.glob("config/*.xml"))
        if path not in planned
    ]
    return stale


def _declares(path: Path, signature: str) -> bool:
    """True if the file contains ``signature``, whitespace aside."""
    return "".join(signature.split()) in "".join(path.read_text(errors="replace").split())


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _signature_digest(planned: PlannedFile) -> str:
    return _sha256("".join(planned.signature.split()).encode())


def read_manifest(root: Path) -> dict[str, tuple[str, str]]:
    """Relative path -> (sha256 of what we last wrote there, of its signature)."""
    path = root / MANIFEST
    if not path.is_file():
        return {}
    entries = (line.split("  ", 2) for line in path.read_text().splitlines())
    return {entry[2]: (entry[0], entry[1]) for entry in entries if len(entry) == 3}


def _step_for(target: Path, planned: PlannedFile, force: bool, boundary: Path, generated: str | None) -> Step:
    resolved = target.resolve()
    if not resolved.is_relative_to(boundary):
        raise UnsafeOutputError(
            f"{target}: resolves to {resolved}, outside the output directory {boundary} "
            "(remove the symlink or choose another -o)"
        )
    if target.is_dir() or (target.exists() and not target.is_file()):
        raise UnsafeOutputError(f"{target}: exists and is not a regular file (move it away)")
    if not target.exists():
        return Step(Action.CREATE, target)
    if target.read_bytes() == planned.content:
        return Step(Action.UNCHANGED, target)
    if not planned.user_owned:
        return Step(Action.UPDATE, target)
    if generated == _sha256(target.read_bytes()):
        return Step(Action.UPDATE, target, "you had not edited it")
    if force:
        return Step(Action.OVERWRITE, target, "--force: your edits are replaced")
    return Step(Action.KEEP, target, "edited by you; --force overwrites it")


def check_destinations(steps: list[Step]) -> None:
    """Refuse, before the first write, any destination that cannot be written: a write failing
    half-way would leave files that include headers never written."""
    files_by_dir: dict[Path, list[Path]] = {}
    for step in steps:
        if step.writes:
            ancestor = step.path.parent
            while not ancestor.exists() and not ancestor.is_symlink():
                ancestor = ancestor.parent
            files_by_dir.setdefault(ancestor, []).append(step.path)
    problems = [
        f"{paths[0]}{f' and {len(paths) - 1} other file(s)' if len(paths) > 1 else ''}: cannot be "
        f"written, {ancestor} {reason}"
        for ancestor, paths in files_by_dir.items()
        if (reason := _cannot_create_in(ancestor))
    ]
    if problems:
        raise UnsafeOutputError("; ".join(problems) + " (nothing was written; choose another -o)")


def _cannot_create_in(directory: Path) -> str | None:
    """Why no file can be created in ``directory``, found by creating and removing one:
    permission bits do not tell (root, /proc, /sys and read-only mounts disagree with them)."""
    if not directory.is_dir():
        return "is not a directory"
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".qco-probe.", suffix=".tmp")
    except OSError as exc:
        return f"is not writable ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(probe)
    return None


@contextlib.contextmanager
def output_lock(out_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out_dir`` (the directory itself, so nothing is left behind):
    two generators into one directory take turns instead of mixing their trees."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise UnsafeOutputError(
            f"{out_dir}: cannot be used as the output directory: {exc.strerror or exc} (choose another -o)"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def remove_leftovers(files: list[PlannedFile], root: Path) -> list[Path]:
    """Delete the temporary files a killed run left beside the files we write (only names
    ``write_atomic`` makes for them); call under ``output_lock``, where no writer is running."""
    ours_by_dir: dict[Path, set[str]] = {root: {MANIFEST}}
    for planned in files:
        ours_by_dir.setdefault(root / planned.path.parent, set()).add(planned.path.name)
    removed = []
    for directory, names in ours_by_dir.items():
        for leftover in directory.glob(".*.tmp") if directory.is_dir() else ():
            match = _TEMPORARY.match(leftover.name)
            if match and match["name"] in names and leftover.is_file() and not leftover.is_symlink():
                leftover.unlink()
                removed.append(leftover)
    return removed


def apply_steps(steps: list[Step], files: list[PlannedFile], root: Path) -> None:
    """Carry out the writing steps once every destination is known to be writable, all or
    nothing (``write_all_atomic``), the record of what we wrote to user-owned files included."""
    check_destinations(steps)
    content = {root / f.path: f.content for f in files}
    writes = [(step.path, content[step.path]) for step in steps if step.writes]
    manifest = read_manifest(root)
    written = {step.path for step in steps if step.writes}
    for planned in files:
        if planned.user_owned and root / planned.path in written:
            manifest[planned.path.as_posix()] = (_sha256(planned.content), _signature_digest(planned))
    text = "".join(f"{content}  {signature}  {name}\n" for name, (content, signature) in sorted(manifest.items()))
    if written and (not (root / MANIFEST).is_file() or (root / MANIFEST).read_text() != text):
        writes.append((root / MANIFEST, text.encode()))
    write_all_atomic(writes)


class OutputWriteError(ReportedError, OSError):
    """The disk refused a write (full, quota, read-only); nothing was left half-written."""


def _write_refused(path: Path, error: OSError) -> OutputWriteError:
    code = errno.errorcode.get(error.errno or 0, "no errno")
    return OutputWriteError(
        f"{path}: cannot be written: {error.strerror or error} ({code}); nothing was written "
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


def _staged(path: Path, data: bytes) -> Path:
    """``data`` in a temporary file beside ``path`` (removed again if writing it fails)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
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


def write_all_atomic(files: list[tuple[Path, bytes]]) -> None:
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


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path`` and rename it over: never half-written.

    Only a regular file (or none) is replaced. A character device or a pipe (``/dev/stdout``,
    ``/dev/null``, a FIFO) is written through, as the user means; anything else -- a symbolic
    link, a directory, a socket -- is refused with ``UnsafeOutputError``, never replaced. A
    write the disk refuses is ``OutputWriteError`` naming the path and errno.
    """
    try:
        if _writes_through(path):
            with path.open("wb") as stream:
                stream.write(data)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(_staged(path, data), path)
    except OSError as error:
        raise _write_refused(path, error) from None
