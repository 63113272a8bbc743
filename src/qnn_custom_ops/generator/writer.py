"""Put a rendered package on disk: plan first, then atomic writes, never outside ``-o``."""

from __future__ import annotations

import contextlib
import enum
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..atomic_files import TEMPORARY_NAME, UnsafeOutputError, write_all_atomic
from ..errors import ReportedError
from .render import PlannedFile

# Where user-owned files live, to find ones whose op left the config.
_USER_GLOBS = ("src/ops/*.cpp", "kernels/*.h")
# What we last wrote to each user-owned file (sha256 of the content and of its signature, path):
# an unchanged file is ours to update; an edited one whose signature changed is reported.
MANIFEST = ".qco-generated"


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
            match = TEMPORARY_NAME.match(leftover.name)
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
