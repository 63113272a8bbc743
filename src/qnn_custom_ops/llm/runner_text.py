"""What ``qnn_llama_runner`` makes of text: the prompt's tokens and the tokens it stops on, as
it computes them from ``--decoder_model_version`` and the ``tokenizer.json`` it is given (what
ExecuTorch's own export pushes for a Hugging Face tokenizer: ``tokenizer.py``'s ``_from_hf``
takes the last file ``save_pretrained`` wrote). The host run computes the same, so
``llm generate`` sees the phone's tokens.

Read from ExecuTorch main of 2026-08-22 (``examples/qualcomm/oss_scripts/llama/``) and
pytorch/tokenizers of 2025-08-23 (``src/hf_tokenizer.cpp``; ExecuTorch pins 1d7ca63, not
available here):

- ``runner.cpp:417-445``: at position 0 the prompt is encoded with one BOS, the tokenizer's
  ``bos_tok()``, in front; ``qnn_llama_runner.cpp:276-279`` formats every ``--prompt`` with the
  version's template first. The tokenizer adds no other special token (no post-processor).
- ``runner.cpp:185-219``: it stops on the tokenizer's ``eos_tok()`` and on the first id of the
  version's stop text (``RunnerVersion.stop_text``).
- ``hf_tokenizer.cpp:247-305``: from ``tokenizer.json`` alone, BOS is the one added token whose
  text holds "bos" or "begin" (of several, the one also holding "text"), EOS likewise with
  "eos" or "end"; one found stands for both, none leaves id 0.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .families import RUNNER_VERSIONS, LlmExportError


def _guess(tokens: Sequence[tuple[str, int]], marks: tuple[str, str]) -> int | None:
    """The id ``HFTokenizer::load`` takes for BOS (``marks`` "bos", "begin") or EOS."""
    candidates = [(text, i) for text, i in tokens if any(mark in text for mark in marks)]
    if len(candidates) > 1:
        candidates = [(text, i) for text, i in candidates if "text" in text]
    return candidates[0][1] if len(candidates) == 1 else None


def tokenizer_json_ids(tokenizer_json: str) -> tuple[int, int]:
    """(BOS, EOS) as the runner's tokenizer reads them from ``tokenizer.json`` alone."""
    added = [(str(t["content"]), int(t["id"])) for t in json.loads(tokenizer_json).get("added_tokens", [])]
    bos, eos = _guess(added, ("bos", "begin")), _guess(added, ("eos", "end"))
    bos = eos if bos is None else bos
    eos = bos if eos is None else eos
    return (0 if bos is None else bos), (0 if eos is None else eos)


@dataclass(frozen=True)
class RunnerText:
    """A tokenizer as ``qnn_llama_runner`` uses it for one version."""

    tokenizer: Any
    version: str
    bos: int
    eos: int

    @staticmethod
    def of(tokenizer: Any, version: str) -> RunnerText:
        """From a Hugging Face fast tokenizer (its ``tokenizer.json`` is what the phone reads)."""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise LlmExportError(
                f"{type(tokenizer).__name__} has no tokenizer.json, which qnn_llama_runner reads; save the "
                "checkpoint's tokenizer as a fast one (tokenizer.json)"
            )
        return RunnerText(tokenizer, version, *tokenizer_json_ids(backend.to_str()))

    def _encode(self, text: str) -> list[int]:
        """The tokenizer's ids of ``text``, special tokens matched, none added."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def stop_ids(self) -> tuple[int, ...]:
        """The tokens the runner's token generator stops on."""
        stop = RUNNER_VERSIONS[self.version].stop_text
        extra = self._encode(stop)[:1] if stop is not None else []
        return tuple(sorted({self.eos, *extra}))

    def prompt_ids(self, text: str, template: bool = True) -> list[int]:
        """The prompt's tokens: the version's template around ``text`` (the runner's ``--prompt``;
        ``template=False``: the text as it is), one BOS in front."""
        before, after = RUNNER_VERSIONS[self.version].template if template else ("", "")
        return [self.bos, *self._encode(before + text + after)]


class RunnerTokenWarning(UserWarning):
    """The BOS or EOS the runner reads from ``tokenizer.json`` is not the checkpoint's own."""


def warn_of_other_tokens(text: RunnerText) -> None:
    """Say so once when the runner's BOS is not the checkpoint's, or it would not stop on the
    checkpoint's EOS (a SentencePiece-style ``tokenizer.json``, ``<s>``/``</s>``, gives it id 0
    for both), and what makes it read the checkpoint's: the tokenizer directory as
    ``--tokenizer_path``, whose ``tokenizer_config.json`` names them (``hf_tokenizer.cpp:199-245``;
    it fails to load when either is missing, so only offered when both are there)."""
    tokenizer = text.tokenizer
    own_bos, own_eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    if (own_bos is None or own_bos == text.bos) and (own_eos is None or own_eos in text.stop_ids()):
        return
    names = tokenizer.convert_ids_to_tokens
    fix = (
        "; pass the export's tokenizer/ directory as --tokenizer_path, whose tokenizer_config.json names "
        "the checkpoint's (llm generate computes what tokenizer.json gives)"
        if own_bos is not None and own_eos is not None
        else ""
    )
    warnings.warn(
        RunnerTokenWarning(
            f"qnn_llama_runner reads tokenizer.json's BOS as {names(text.bos)!r} (id {text.bos}) and EOS as "
            f"{names(text.eos)!r} (id {text.eos}), not the checkpoint's {tokenizer.bos_token!r} and "
            f"{tokenizer.eos_token!r}: on the phone every prompt starts with that BOS and generation stops on "
            f"ids {list(text.stop_ids())} only{fix}"
        ),
        stacklevel=2,
    )
