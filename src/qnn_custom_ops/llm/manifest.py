"""An LLM export's ``manifest.json`` (``LlmManifest``): what ``llm export`` wrote, its shapes,
version, encodings and files, read back whole and checked once before anything is sized by it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .checkpoint_reading import LlmCheckpointError
from .export_files import MANIFEST, PROGRAM, ExportFile, relative_path
from .export_targets import METHODS
from .families import FAMILIES, RUNNER_VERSIONS
from .json_values import JsonValueError, integer, load_object, required, sequence, string
from .manifest_json import (
    LARGEST_SIZE,
    MANIFEST_LIMIT,
    checksum,
    encodings_from_json,
    encodings_to_json,
    shape_from_json,
)
from .runner_loop import MethodEncodings
from .shapes import LlmShape

TARGETS = ("host", "qnn")


@dataclass(frozen=True)
class LlmManifest:
    """What ``llm export`` wrote, read back whole and checked once: every value typed and in
    range (``manifest_json``) before anything is sized by it."""

    model_type: str
    decoder_model_version: str
    quant: str
    target: str
    shape: LlmShape
    eos_ids: tuple[int, ...]
    #: Per method, its inputs' and outputs' encodings (a quantized program's; None for float).
    encodings: dict[str, MethodEncodings] | None
    #: The data file beside the program holding its weights (a host export's), None when the
    #: .pte holds them (a QNN export's, or a host export written before the data file).
    program_data: str | None = None
    #: Every file of the export but the manifest, with its size and sha256 (``llm generate``
    #: checks them); empty in a manifest written before exports listed their files.
    files: tuple[ExportFile, ...] = ()

    def __post_init__(self) -> None:
        from ..quantizer import QUANT_MODES

        for key, value, choices in (
            ("model_type", self.model_type, tuple(FAMILIES)),
            ("decoder_model_version", self.decoder_model_version, tuple(RUNNER_VERSIONS)),
            ("quant", self.quant, ("none", *QUANT_MODES)),
            ("target", self.target, TARGETS),
        ):
            if value not in choices:
                raise JsonValueError(f"{key} is {value!r}, not one of {', '.join(choices)}")
        if self.program_data is not None:
            relative_path(self.program_data, "program_data")
        listed = {file.path for file in self.files}
        unlisted = [name for name in (PROGRAM, self.program_data) if self.files and name and name not in listed]
        if unlisted:
            raise JsonValueError(f"files does not list {unlisted[0]}")

    def to_json(self) -> str:
        body = {
            **asdict(self),
            "shape": asdict(self.shape),
            "eos_ids": list(self.eos_ids),
            "encodings": encodings_to_json(self.encodings),
            "files": [file.to_json() for file in self.files],
        }
        return json.dumps({**body, "checksum": checksum(body)}, indent=2)

    @staticmethod
    def read(directory: Path, verify: bool = True) -> LlmManifest:
        """The manifest of an export directory, or one error saying what to do; ``verify``: its
        checksum too (an edit or a flipped bit in any value is refused)."""
        path = directory / MANIFEST
        if not path.is_file():
            raise LlmCheckpointError(
                f"{directory}: no {MANIFEST}; pass a directory written by qnn-custom-ops llm export"
            )
        try:
            body = load_object(path, MANIFEST_LIMIT)
            manifest = LlmManifest(
                string(required(body, "model_type"), "model_type"),
                string(required(body, "decoder_model_version"), "decoder_model_version"),
                string(required(body, "quant"), "quant"),
                string(required(body, "target"), "target"),
                shape_from_json(required(body, "shape")),
                tuple(integer(i, "eos_ids[]", 0, LARGEST_SIZE) for i in sequence(required(body, "eos_ids"), "eos_ids")),
                encodings_from_json(required(body, "encodings"), METHODS),
                None if body.get("program_data") is None else string(body["program_data"], "program_data"),
                tuple(ExportFile.from_json(file) for file in sequence(body.get("files", []), "files")),
            )
        except JsonValueError as exc:
            raise LlmCheckpointError(
                f"{path}: not a manifest written by qnn-custom-ops llm export ({exc}); export again"
            ) from None
        if verify and ("checksum" not in body or not manifest.files):
            raise LlmCheckpointError(
                f"{path}: written before exports listed their files, so they cannot be checked; export again "
                "(or pass --no-verify to use it as it is)"
            )
        if verify and body["checksum"] != checksum(body):
            raise LlmCheckpointError(
                f"{path}: its values were changed after llm export wrote them (its checksum differs); export "
                "again (or pass --no-verify to use it as it is)"
            )
        return manifest
