"""``llm families``: what the export supports, read off the registries (``families.FAMILIES``,
``RUNNER_VERSIONS``, ``ROPE_TYPES``), never written out by hand: each family's ``model_type``,
the ``qnn_llama_runner --decoder_model_version`` it maps to, what it adds to the Llama layer,
its windows, the RoPE types and what is refused and why.

Imports nothing but ``families`` (which imports nothing heavy), so the CLI lists them at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from .families import FAMILIES, ROPE_TYPES, RUNNER_VERSIONS, Family, RopeType, RunnerVersion

_PLAIN = Family()


@dataclass(frozen=True)
class FamilyRow:
    """One family as ``llm families`` prints it."""

    model_type: str
    runner_versions: str
    adds: str
    windows: str


def _name(value: object) -> str:
    """A registry entry's value as words: a function by its name (``_final_softcap`` -> final softcap)."""
    if isinstance(value, bool):
        return ""
    return getattr(value, "__name__", str(value)).strip("_").replace("_", " ")


def _versions(family: Family) -> str:
    by_token = [f"{version} if {token}" for token, version in family.versions_by_token]
    return "; ".join([*by_token, family.runner_version if not by_token else f"else {family.runner_version}"])


def _adds(family: Family) -> str:
    """The fields whose values are not Llama's, as words (the runner version aside)."""
    added = []
    for field in fields(Family):
        if field.name in ("runner_version", "versions_by_token"):
            continue
        value = getattr(family, field.name)
        if value != getattr(_PLAIN, field.name):
            name, word = field.name.replace("_", " "), _name(value)
            added.append(name + (f" ({word})" if word and word != name else ""))
    return ", ".join(added) or "-"


def _windows(family: Family) -> str:
    """What the runner's versions of the family do with a sliding window."""
    versions = {family.runner_version, *(version for _, version in family.versions_by_token)}
    if all(RUNNER_VERSIONS[v].window_mask for v in versions):
        return "window mask"
    return "refused if < --ctx"


def family_rows() -> list[FamilyRow]:
    return [
        FamilyRow(model_type, _versions(family), _adds(family), _windows(family))
        for model_type, family in FAMILIES.items()
    ]


class _ReadNames:
    """A config that records which of its values a rule reads (each reads as 0)."""

    def __init__(self) -> None:
        self.read: list[str] = []

    def __getattr__(self, name: str) -> int:
        self.read.append(name)
        return 0


def _rope_limit(rope: RopeType) -> str:
    """``any --ctx``, or the config value a RoPE type's context is limited by (read off its rule)."""
    names = _limit_names(rope)
    return "any --ctx" if names is None else f"--ctx <= {names}: past it {rope.why}"


def _limit_names(rope: RopeType) -> str | None:
    """The config value(s) a RoPE type's context is limited by, read off its rule (None: none)."""
    if rope.fixed_up_to is None:
        return None
    config = _ReadNames()
    rope.fixed_up_to({}, config)
    return " or ".join(config.read)


def _version_text(version: RunnerVersion) -> str:
    stop = f"stops also on {version.stop_text}" if version.stop_text else "stops on EOS only"
    template = "a chat template" if version.template != ("", "") else "no template"
    mask = ", a window mask input (hides nothing when --ctx <= the window)" if version.window_mask else ""
    return f"{template}, {stop}{mask}"


#: What the export refuses, and why (the checks that raise these live in ``families``,
#: ``config_checks`` and ``hf``; each is one line naming the value and the fix).
REFUSED = (
    ("any other model_type", "no registry entry: its layer is not known to the static export"),
    ("model_type gemma3 (multimodal)", "load the text model, Gemma3ForCausalLM (model_type gemma3_text)"),
    ("any other rope_type", "its frequencies are not known to the static export"),
    ("dynamic / longrope past their limit", "the frequencies change mid-generation; a static table cannot follow"),
    ("a window < --ctx without a window mask", "qnn_llama_runner builds a window mask for gemma2/gemma3 only"),
    ("several windows < --ctx", "qnn_llama_runner builds one window mask"),
    ("--ctx past max_position_embeddings", "past the positions the model was made for"),
)

Table = list[tuple[str, ...]]


def tables() -> list[tuple[str, Table]]:
    """(title, rows with a header first) of each table ``llm families`` prints."""
    families: Table = [("model_type", "runner version (by tokenizer token)", "adds to the Llama layer", "windows")]
    families += [(r.model_type, r.runner_versions, r.adds, r.windows) for r in family_rows()]
    ropes: Table = [("rope_type", "exported for")]
    ropes += [(name, _rope_limit(rope)) for name, rope in ROPE_TYPES.items()]
    versions: Table = [("--decoder_model_version", "what qnn_llama_runner does with it")]
    versions += [(name, _version_text(version)) for name, version in RUNNER_VERSIONS.items()]
    refused: Table = [("refused", "why, or what to do")]
    refused += list(REFUSED)
    return [("families", families), ("RoPE types", ropes), ("runner versions", versions), ("refused", refused)]


def _plain(rows: Table) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip() for row in rows]


def _markdown(rows: Table) -> list[str]:
    def line(row: tuple[str, ...]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"

    return [line(rows[0]), "| " + " | ".join("---" for _ in rows[0]) + " |", *map(line, rows[1:])]


FORMATS: dict[str, Callable[[Table], list[str]]] = {"text": _plain, "markdown": _markdown}


def render(form: str = "text") -> str:
    """Every table, one after another, as plain columns or Markdown."""
    lines: list[str] = []
    for title, rows in tables():
        lines += [f"{'### ' if form == 'markdown' else ''}{title}", "", *FORMATS[form](rows), ""]
    return "\n".join(lines).rstrip() + "\n"


def as_json() -> dict[str, Any]:
    """The same, as data: per family its runner version (and the tokens that pick another), what
    it adds, whether its runner versions take a window mask; per RoPE type the config value its
    context is limited by; per runner version its template, stop text and window mask; the refusals."""

    def versions(family: Family) -> set[str]:
        return {family.runner_version, *(version for _, version in family.versions_by_token)}

    return {
        "families": [
            {
                "model_type": model_type,
                "runner_version": family.runner_version,
                "runner_version_by_token": dict(family.versions_by_token),
                "adds": [] if _adds(family) == "-" else _adds(family).split(", "),
                "window_mask": all(RUNNER_VERSIONS[v].window_mask for v in versions(family)),
            }
            for model_type, family in FAMILIES.items()
        ],
        "rope_types": [
            {"rope_type": name, "ctx_at_most": _limit_names(rope), "why": rope.why or None}
            for name, rope in ROPE_TYPES.items()
        ],
        "runner_versions": [
            {
                "decoder_model_version": name,
                "template": list(version.template),
                "stop_text": version.stop_text,
                "window_mask": version.window_mask,
            }
            for name, version in RUNNER_VERSIONS.items()
        ],
        "refused": [{"what": what, "why": why} for what, why in REFUSED],
    }
