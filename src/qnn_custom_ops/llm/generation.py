"""Greedy generation over the prefill and decode programs of ``export_llm``, the cache carried
between calls: on the host ExecuTorch runtime (``host_step``) or eagerly (``eager_step``, which
also gives PT2E its calibration inputs). Programs of ``cache="runner"`` are driven as ExecuTorch's
device runner drives them (``runner_loop.RunnerLoop``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .hf import LlmExportError
from .runner_loop import RunnerLoop, check_fits
from .shapes import LlmShape
from .steps import Generation, Step, snapshot, token_ids


@dataclass
class KvCache:
    """The caches the programs take, carried from call to call."""

    shape: LlmShape
    tensors: list[torch.Tensor] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tensors = self.tensors or self.shape.empty_cache()

    def carry(self, outputs: Sequence[torch.Tensor], starts: Sequence[int], counts: Sequence[int]) -> None:
        """Take a call's cache outputs: ``rows`` writes sequence b's ``counts[b]`` new rows at
        ``starts[b]`` in place (the only bytes of the cache that change), ``scatter`` takes the
        new caches."""
        if self.shape.cache == "scatter":
            self.tensors = list(outputs)
            return
        for cache, rows in zip(self.tensors, outputs):
            for b, (start, count) in enumerate(zip(starts, counts)):
                cache[b, :, start : start + count] = rows[b, :, :count]


def _check(
    shape: LlmShape, prompts: Sequence[Sequence[int]], new_tokens: int, forced: Sequence[Sequence[int]] | None
) -> None:
    if len(prompts) != shape.batch:
        raise LlmExportError(
            f"greedy: {len(prompts)} prompts for programs of batch {shape.batch} (export_llm's batch): "
            f"pass {shape.batch}"
        )
    for prompt in prompts:
        check_fits(shape, len(prompt), new_tokens, "greedy")
    for tokens in forced or ():
        if len(tokens) < new_tokens:
            raise LlmExportError(f"greedy: forced has {len(tokens)} tokens, fewer than new_tokens={new_tokens}")


def greedy(
    shape: LlmShape,
    prefill: Step,
    decode: Step,
    prompt: Sequence[int],
    new_tokens: int,
    forced: Sequence[int] | None = None,
    record: bool = False,
) -> Generation:
    """Prefill ``prompt`` (padded to ``prefill_len``), then decode one token per call, each the
    argmax of the last logits -- or, teacher-forced, ``forced[i]`` (to compare a quantized
    run's logits with float's on the same tokens). For programs of batch 1; see ``greedy_batch``."""
    return greedy_batch(shape, prefill, decode, [prompt], new_tokens, None if forced is None else [forced], record)[0]


def greedy_batch(
    shape: LlmShape,
    prefill: Step,
    decode: Step,
    prompts: Sequence[Sequence[int]],
    new_tokens: int,
    forced: Sequence[Sequence[int]] | None = None,
    record: bool = False,
) -> list[Generation]:
    """``greedy`` for the ``shape.batch`` sequences of batched programs at once, one prompt each
    (lengths may differ: each sequence decodes from its own position). Recorded inputs are kept
    on the first Generation: they are the programs' inputs, all sequences together. Programs of
    ``cache="runner"`` run in ``RunnerLoop``, as ExecuTorch's device runner runs them."""
    prompts = [token_ids(prompt, shape.vocab, f"greedy: prompt {b}") for b, prompt in enumerate(prompts)]
    _check(shape, prompts, new_tokens, forced)
    if shape.cache == "runner":
        loop = RunnerLoop(shape, prefill, decode)
        return [loop.generate(prompts[0], new_tokens, forced=None if forced is None else forced[0], record=record)]
    cache = KvCache(shape)
    results = [Generation([], [], [], []) for _ in prompts]
    inputs = shape.inputs(prompts, [0] * len(prompts), shape.prefill_len, cache.tensors)
    outputs = prefill(inputs)
    if record:
        results[0].prefill_inputs.append(snapshot(inputs))
    lengths = [len(prompt) for prompt in prompts]
    cache.carry(outputs[1:], [0] * len(prompts), lengths)
    logits = [outputs[0][b, length - 1] for b, length in enumerate(lengths)]
    positions = lengths
    for step in range(new_tokens):
        tokens = [int(row.argmax()) if forced is None else int(forced[b][step]) for b, row in enumerate(logits)]
        for result, token, chosen_from in zip(results, tokens, logits):
            result.tokens.append(token)
            result.logits.append(chosen_from)
        if step == new_tokens - 1:
            break
        inputs = shape.inputs([[token] for token in tokens], positions, 1, cache.tensors)
        if record:
            results[0].decode_inputs.append(snapshot(inputs))
        outputs = decode(inputs)
        cache.carry(outputs[1:], positions, [1] * len(prompts))
        logits = [outputs[0][b, -1] for b in range(len(prompts))]
        positions = [position + 1 for position in positions]
    return results
