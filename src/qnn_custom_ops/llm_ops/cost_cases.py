"""Shapes the LLM ops are measured on: a prefill shape (2048 tokens of a 7B-class model,
working sets far beyond the caches: memory-bound) and a decode shape (one token), per op.

Each case carries its PyTorch inputs (for eager and the decomposed graph on XNNPACK) and the
same memory as kernel tensors (for the kernel through the C ABI)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..runtime.cost import KernelCase
from ..runtime.kernel_abi import KernelDType, KernelTensor
from .ops import OPS_BY_NAME
from .reference import gelu_and_mul, rms_norm, rope, silu_and_mul

_KERNEL_DTYPES = {torch.float32: KernelDType.Float32, torch.int32: KernelDType.Int32}


@dataclass(frozen=True)
class LlmCase:
    op: str  # qco_llm op name
    phase: str  # "prefill" | "decode"
    args: tuple[torch.Tensor, ...]
    decomposed: Callable[..., torch.Tensor]  # the op in exportable standard torch ops

    @property
    def label(self) -> str:
        return f"{self.phase} " + " ".join("x".join(map(str, a.shape)) for a in self.args)

    def kernel_case(self) -> KernelCase:
        result = OPS_BY_NAME[self.op].reference(*self.args)
        results = result if isinstance(result, tuple) else (result,)
        outputs = tuple(KernelTensor(torch.empty(r.shape).numpy(), KernelDType.Float32) for r in results)
        inputs = tuple(KernelTensor(a.numpy(), _KERNEL_DTYPES[a.dtype]) for a in self.args)
        moved = 2 * outputs[0].array.nbytes + self.args[1].nbytes if self.op == "ctx_gather" else None  # rows read
        return KernelCase(OPS_BY_NAME[self.op].qnn_type, self.label, outputs, inputs, (), moved)


def _scatter_indexed(cache: torch.Tensor, position_ids: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """QEfficient's PyTorch CtxScatter: index_put with broadcast [batch, heads, seq] indices."""
    batch, heads = cache.shape[:2]
    out = cache.clone()
    out[torch.arange(batch)[:, None, None], torch.arange(heads)[None, :, None], position_ids[:, None, :].long()] = (
        updates
    )
    return out


def _gather_indexed(cache: torch.Tensor, ctx_indices: torch.Tensor) -> torch.Tensor:
    batch, heads = cache.shape[:2]
    return cache[torch.arange(batch)[:, None, None], torch.arange(heads)[None, :, None], ctx_indices[:, None, :].long()]


def llm_cases(seed: int = 0) -> list[LlmCase]:
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    def positions(batch: int, count: int, ctx_len: int) -> torch.Tensor:
        return torch.stack([torch.randperm(ctx_len, generator=g)[:count] for _ in range(batch)]).int()

    cases = []
    for phase, tokens in (("prefill", 2048), ("decode", 1)):
        cases += [
            LlmCase("rms_norm", phase, (randn(tokens, 4096), randn(4096)), rms_norm),
            LlmCase("silu_and_mul", phase, (randn(tokens, 2 * 4096),), silu_and_mul),
            LlmCase("gelu_and_mul", phase, (randn(tokens, 2 * 4096),), gelu_and_mul),
            LlmCase("rope", phase, (randn(1, 32, tokens, 128), randn(tokens, 64), randn(tokens, 64)), rope),
            LlmCase(
                "ctx_scatter",
                phase,
                (randn(1, 8, 4096, 128), positions(1, tokens, 4096), randn(1, 8, tokens, 128)),
                _scatter_indexed,
            ),
            LlmCase("ctx_gather", phase, (randn(1, 8, 4096, 128), positions(1, tokens, 4096)), _gather_indexed),
        ]
    return cases
