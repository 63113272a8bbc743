"""The HTP op package generator: an ``OpPackage`` becomes ``<out>/<PackageName>/``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..atomic_files import UnsafeOutputError
from ..opdef import OpPackage
from .render import APIS, PlannedFile, render_package
from .writer import Action, Step, apply_steps, output_lock, plan_steps, remove_leftovers

__all__ = ["Action", "GenerationResult", "Step", "UnsafeOutputError", "generate"]


@dataclass(frozen=True)
class GenerationResult:
    package_dir: Path
    steps: tuple[Step, ...]
    dry_run: bool
    leftovers: tuple[Path, ...] = ()  # temporary files of a killed run, removed

    def count(self, action: Action) -> int:
        return sum(1 for s in self.steps if s.action == action)

    def summary(self) -> str:
        counts = ", ".join(f"{self.count(a)} {a.value}" for a in Action if self.count(a))
        verb = "would write" if self.dry_run else "wrote"
        cleaned = f"; removed {len(self.leftovers)} temporary file(s) of an interrupted run" if self.leftovers else ""
        return f"{self.package_dir}: {verb} {sum(s.writes for s in self.steps)} files ({counts}){cleaned}"


def generate(
    package: OpPackage, out_dir: str | Path, *, force: bool = False, dry_run: bool = False, api: str = "classic"
) -> GenerationResult:
    """Generate (or update) the package under ``out_dir/<PackageName>`` for ``api`` (``"classic"``,
    the HTP's C++ op package interface, or ``"qhpi"``, QAIRT's C plugin interface).

    User-owned files (``src/ops/*.cpp``, ``kernels/*.h``) are created once and then kept
    unless ``force``; files of ops that left the config are reported as stale, not deleted.
    Everything is rendered and checked before the first byte is written.
    """
    out_dir = Path(out_dir)
    root = out_dir / package.name
    if api not in APIS:
        raise ValueError(f"api {api!r}: use one of {', '.join(APIS)}")
    files: list[PlannedFile] = render_package(package, api)
    if dry_run:
        return GenerationResult(root, tuple(plan_steps(root, out_dir, files, force)), dry_run)
    with output_lock(out_dir):
        leftovers = remove_leftovers(files, root)
        steps = plan_steps(root, out_dir, files, force)
        apply_steps(steps, files, root)
    return GenerationResult(root, tuple(steps), dry_run, tuple(leftovers))
