"""Diagnostics: every problem in a config, with its place and its fix, reported at once."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import ReportedError

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Diagnostic:
    """One finding, printed as ``file:line: severity: what (how to fix)``."""

    file: str
    line: int
    severity: Severity
    message: str
    fix: str = ""

    def __str__(self) -> str:
        fix = f" ({self.fix})" if self.fix else ""
        return f"{self.file}:{self.line}: {self.severity}: {self.message}{fix}"


class OpDefError(ReportedError, ValueError):
    """A config (or set of configs) that cannot be used; ``diagnostics`` lists every error."""

    def __init__(self, diagnostics: Iterable[Diagnostic]):
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class OpDefWarning(UserWarning):
    """An oddity of a real config that the SDK tolerates and so do we, loudly."""


class Reporter:
    """Collects diagnostics for one load; raises them together at the end."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []

    def error(self, file: str | Path, line: int | None, message: str, fix: str = "") -> None:
        self.diagnostics.append(Diagnostic(str(file), line or 0, "error", message, fix))

    def warning(self, file: str | Path, line: int | None, message: str, fix: str = "") -> None:
        self.diagnostics.append(Diagnostic(str(file), line or 0, "warning", message, fix))

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]

    def raise_if_errors(self) -> None:
        """If anything is an error, raise every diagnostic found so far (warnings included,
        in file order), so one report holds them all."""
        if self.errors:
            raise OpDefError(sorted(self.diagnostics, key=lambda d: (d.file, d.line)))

    def emit_warnings(self) -> None:
        for diagnostic in self.warnings:
            warnings.warn(str(diagnostic), OpDefWarning, stacklevel=3)
