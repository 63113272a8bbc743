"""Put a rendered package on disk: plan first, then atomic writes, never outside ``-o``."""

from __future__ import annotations

import enum
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import ReportedError
from .render import PlannedFile

# Where user-owned files live, to find ones whose op left the config.
_USER_GLOBS = ("src/ops/*.cpp", "kernels/*.h")


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


def plan_steps(root: Path, out_dir: Path, files: list[PlannedFile], force: bool) -> list[Step]:
    """What writing ``files`` under ``root`` would do; reads the disk, writes nothing."""
    boundary = out_dir.resolve()
    steps = [_step_for(root / f.path, f, force, boundary) for f in files]
    planned = {root / f.path for f in files}
    for pattern in _USER_GLOBS:
        for existing in sorted(root.glob(pattern)):
            if existing not in planned:
                steps.append(Step(Action.STALE, existing, "its op is no longer in the config; not deleted"))
    return steps


def _step_for(target: Path, planned: PlannedFile, force: bool, boundary: Path) -> Step:
    resolved = target.resolve()
    if not resolved.is_relative_to(boundary):
        raise UnsafeOutputError(f"{target}: resolves to {resolved}, outside the output directory {boundary} "
                                "(remove the symlink or choose another -o)")
    if target.is_dir() or (target.exists() and not target.is_file()):
        raise UnsafeOutputError(f"{target}: exists and is not a regular file (move it away)")
    if not target.exists():
        return Step(Action.CREATE, target)
    if target.read_bytes() == planned.content:
        return Step(Action.UNCHANGED, target)
    if not planned.user_owned:
        return Step(Action.UPDATE, target)
    if force:
        return Step(Action.OVERWRITE, target, "--force: your edits are replaced")
    return Step(Action.KEEP, target, "edited by you; --force overwrites it")


def apply_steps(steps: list[Step], files: list[PlannedFile], root: Path) -> None:
    """Carry out the writing steps; each file is replaced atomically."""
    content = {root / f.path: f.content for f in files}
    for step in steps:
        if step.writes:
            write_atomic(step.path, content[step.path])


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path`` and rename it over: never half-written.

    Only a regular file (or none) is replaced. A character device or a pipe (``/dev/stdout``,
    ``/dev/null``, a FIFO) is written through, as the user means; anything else -- a symbolic
    link, a directory, a socket -- is refused with ``UnsafeOutputError``, never replaced.
    """
    if path.is_symlink():
        raise UnsafeOutputError(f"{path}: is a symbolic link; refusing to replace it (name its target, or remove it)")
    if path.exists():
        mode = path.stat().st_mode
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
            with path.open("wb") as stream:
                stream.write(data)
            return
        if not stat.S_ISREG(mode):
            raise UnsafeOutputError(f"{path}: is not a regular file; refusing to replace it (choose a file path)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
