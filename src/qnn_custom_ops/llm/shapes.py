"""The static shapes an LLM's prefill and decode programs share (``LlmShape``), and the inputs of
one call as each cache layout takes them.

Inputs of both programs: ``tokens [batch, seq] int32``, ``position_ids [batch, seq] int32``
(padding at the end as -1: it writes nothing and attends to nothing), then the K caches of every
layer, then the V caches (``"runner"``: as ``qnn_llama_runner`` passes them, masks included).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

CACHE_LAYOUTS = ("rows", "scatter", "runner")


@dataclass(frozen=True)
class LlmShape:
    """The static shapes both programs share."""

    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    ctx_len: int
    prefill_len: int
    cache: str
    batch: int = 1
    #: ``cache="runner"``: the window of the layers that read the window mask, None when no
    #: layer has one (the programs then take one mask).
    window: int | None = None

    @property
    def masks(self) -> int:
        """How many masks the ``runner`` programs take: the full one, and the window's if any."""
        return 1 if self.window is None else 2

    def empty_cache(self) -> list[torch.Tensor]:
        """Zeroed K caches of every layer, then V caches, as the programs take them (``runner``:
        K transposed ``[b, kv_heads, head_dim, ctx_len]``, of which a program reads the first
        ``ctx_len - ar_len`` columns)."""
        rows = torch.zeros(self.batch, self.kv_heads, self.ctx_len, self.head_dim)
        k = rows.transpose(2, 3).contiguous() if self.cache == "runner" else rows
        return [k.clone() for _ in range(self.layers)] + [rows.clone() for _ in range(self.layers)]

    def runner_inputs(
        self, tokens: Sequence[int], masks: Sequence[torch.Tensor], positions: Sequence[int], caches: list[torch.Tensor]
    ) -> tuple:
        """One call of a ``runner`` program, as ``qnn_llama_runner`` passes it: tokens ``[1, ar]``
        int32, the masks ``[1, 1, ar, ctx_len]``, ``input_pos [1, ar]`` int32, then the first
        ``ctx_len - ar`` columns of every K cache and rows of every V cache."""
        ar = len(tokens)
        read = [self.cache_read(k, v, ar) for k, v in zip(caches[: self.layers], caches[self.layers :])]
        return (
            torch.tensor([list(tokens)], dtype=torch.int32),
            *masks,
            torch.tensor([list(positions)], dtype=torch.int32),
            *(k for k, _ in read),
            *(v for _, v in read),
        )

    def cache_read(self, k: torch.Tensor, v: torch.Tensor, ar: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What a ``runner`` call of ``ar`` tokens reads of one layer's K and V caches: the first
        ``ctx_len - ar`` columns of K, rows of V."""
        kept = self.ctx_len - ar
        return k[..., :kept].contiguous(), v[:, :, :kept].contiguous()

    def example_inputs(self, length: int) -> tuple:
        """Inputs of a call of ``length`` tokens per sequence, for export."""
        caches = self.empty_cache()
        if self.cache == "runner":
            masks = [torch.zeros(1, 1, length, self.ctx_len) for _ in range(self.masks)]  # distinct: export
            return self.runner_inputs([0] * length, masks, range(length), caches)  # takes one tensor twice as one
        start = 0 if length == self.prefill_len else self.prefill_len
        return self.inputs([[0] * length] * self.batch, [start] * self.batch, length, caches)

    def inputs(
        self, tokens: Sequence[Sequence[int]], starts: Sequence[int], length: int, caches: list[torch.Tensor]
    ) -> tuple:
        """One call's inputs: sequence b's ``tokens[b]`` at positions ``starts[b]...``, each
        padded to ``length`` with token 0 at position -1."""
        token_rows = [list(row) + [0] * (length - len(row)) for row in tokens]
        position_rows = [
            list(range(start, start + len(row))) + [-1] * (length - len(row)) for row, start in zip(tokens, starts)
        ]
        token_ids = torch.tensor(token_rows, dtype=torch.int32)
        return (token_ids, torch.tensor(position_rows, dtype=torch.int32), *caches)
