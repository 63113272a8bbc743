"""The process table, read from /proc: what the tests of child processes (an emulator, an
isolated kernel call) check after their parent is killed."""

from __future__ import annotations

from pathlib import Path


def children(pid: int, name: str | None = None) -> list[int]:
    """The processes whose parent is ``pid`` (named ``name``, when given)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            if (name is None or fields[0].endswith(f"({name}")) and int(fields[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
