"""The files of an LLM export directory as one whole thing: written into a fresh directory that
then takes the old one's place, listed in the manifest with each one's size and sha256, and
checked against that list before anything reads them (a flipped bit in the weights, a swapped
tokenizer, a stale chat template are each one error naming the file)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..atomic_files import Contents, write_all_atomic, write_atomic, write_directory_atomic
from ..errors import UsageError
from .json_values import JsonValueError, integer, mapping, required, string

MANIFEST, PROGRAM, PROGRAM_DATA, TOKENIZER = "manifest.json", "model.pte", "model.ptd", "tokenizer"
#: Every name an export directory holds at its top: a directory holding anything else is not one.
EXPORT_NAMES = frozenset({MANIFEST, PROGRAM, PROGRAM_DATA, TOKENIZER})
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_CHUNK = 1 << 20
#: What ``llm generate`` says to do about an export whose files are not its manifest's.
_FIX = "export again (or pass --no-verify to use it as it is)"


class ExportDirectoryError(UsageError):
    """An export directory that cannot be written, or whose files are not the ones its manifest lists."""


def relative_path(text: str, key: str) -> str:
    """``text`` when it names a file inside the export directory (relative, POSIX, no ``..``),
    as a manifest must: a manifest can only point at the export's own files."""
    path = PurePosixPath(text)
    if not text or "\\" in text or "\0" in text or path.is_absolute() or str(path) != text or ".." in path.parts:
        raise JsonValueError(f"{key} is {text!r}, not a path inside the export directory")
    return text


@dataclass(frozen=True)
class ExportFile:
    """One file of an export, as its manifest lists it."""

    path: str
    size: int
    sha256: str

    def __post_init__(self) -> None:
        relative_path(self.path, "files[].path")
        integer(self.size, f"the size of {self.path}", 0, 2**63 - 1)
        if not isinstance(self.sha256, str) or not _SHA256.match(self.sha256):
            raise JsonValueError(f"the sha256 of {self.path} is {self.sha256!r}, not 64 lowercase hex digits")

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}

    @staticmethod
    def from_json(value: object) -> ExportFile:
        entry = mapping(value, "files[]")
        return ExportFile(
            string(required(entry, "path", "files[]."), "files[].path"),
            required(entry, "size", "files[]."),
            required(entry, "sha256", "files[]."),
        )


def sha256_of(path: Path) -> str:
    """The file's sha256, read a MiB at a time (a weights file is gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def inside(directory: Path, relative: str) -> Path:
    """``directory / relative``, refused when a link takes it outside ``directory``."""
    path = directory / relative
    if not path.resolve().is_relative_to(directory.resolve()):
        raise ExportDirectoryError(f"{path}: leads outside {directory} (a symbolic link?); {_FIX}")
    return path


def verify_files(directory: Path, files: Sequence[ExportFile]) -> None:
    """Every file the manifest lists, there with its size and sha256, and nothing else in the
    directory (a file beside them, a tokenizer's stale chat template, would be read too)."""
    for file in files:
        path = inside(directory, file.path)
        if not path.is_file():
            raise ExportDirectoryError(f"{path}: missing, though the export's {MANIFEST} lists it; {_FIX}")
        size = path.stat().st_size
        if size != file.size:
            raise ExportDirectoryError(f"{path}: {size} bytes, where {MANIFEST} says {file.size}; {_FIX}")
        if sha256_of(path) != file.sha256:
            raise ExportDirectoryError(f"{path}: its content is not what {MANIFEST} lists (sha256 differs); {_FIX}")
    listed = {MANIFEST, *(file.path for file in files)}
    extra = sorted(p for p in _files_under(directory) if p not in listed)
    if extra:
        raise ExportDirectoryError(
            f"{directory / extra[0]}: not a file of this export ({MANIFEST} does not list it); {_FIX}"
        )


def _files_under(directory: Path) -> Iterable[str]:
    """Every file below ``directory``, as a path relative to it."""
    return (p.relative_to(directory).as_posix() for p in directory.rglob("*") if not p.is_dir())


def check_replaceable(directory: Path) -> None:
    """Refuse ``-o`` naming something an export must not replace: a file, or a directory holding
    anything an export does not (never emptied: it is someone's)."""
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise ExportDirectoryError(f"-o {directory}: exists and is not a directory; choose another")
    if not directory.is_dir():
        return
    if Path.cwd().resolve().is_relative_to(directory.resolve()):
        raise ExportDirectoryError(
            f"-o {directory}: holds the current directory, which replacing it whole would leave deleted; "
            "choose a directory beside it"
        )
    foreign = sorted(p.name for p in directory.iterdir() if p.name not in EXPORT_NAMES)
    if foreign:
        raise ExportDirectoryError(
            f"-o {directory}: holds {', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}, so it is not an "
            "export this one may replace; choose a new or empty directory"
        )


def write_export(
    directory: Path, files: Sequence[tuple[str, Contents]], manifest: Callable[[tuple[ExportFile, ...]], bytes]
) -> tuple[ExportFile, ...]:
    """``files`` and then the manifest ``manifest`` makes of their table, in a fresh directory
    that takes ``directory``'s place whole (an export there before is replaced, never mixed
    with); the table returned."""
    check_replaceable(directory)
    table: list[tuple[ExportFile, ...]] = []

    def fill(fresh: Path) -> None:
        write_all_atomic([(fresh / name, data) for name, data in files])
        table.append(
            tuple(ExportFile(name, (fresh / name).stat().st_size, sha256_of(fresh / name)) for name, _ in files)
        )
        write_atomic(fresh / MANIFEST, manifest(table[0]))

    write_directory_atomic(directory, fill)
    return table[0]
