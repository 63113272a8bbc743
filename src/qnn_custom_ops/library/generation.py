"""Greedy generation over the prefill and decode programs of ``export_llm``, the cache carried
between calls: on the host ExecuTorch runtime (``host_step``) or eagerly (``eager_step``, which
also gives PT2E its calibration inputs). Programs of ``cache="runner"`` are driven as ExecuTorch's
device runner drives them (``runner_loop.RunnerLoop``).
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..lowering.weight_sharing import EqualTensors
from .hf import LlmExportError, LlmPrograms, LlmShape
from .runner_loop import RunnerLoop, check_fits
from .steps import Generation, Step, eager_step, snapshot, token_ids


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


#: The activation tensors of each op a calibration must observe over all its samples: every
#: input and output but static weights, integer indices and what already shares the cache's.
_ACTIVATIONS = {
    "RmsNorm": (0,),
    "FusedAddRmsNorm": (0, 1),
    "SiluAndMul": (0,),
    "GeluAndMul": (0,),
    "Rope": (0, 1, 2),
    "CtxScatter": (0,),
    "CtxGather": (0,),
    "CtxScatterCb": (0,),
    "CtxGatherCb": (0,),
}


def min_max_overrides(quant_dtype: str) -> dict:
    """``llm_quant_overrides()`` with every other activation of the ops observed by min-max.
    executorch's activation observers keep a moving average (1% per sample): calibrated on a few
    generations they keep about the first sample's range and clip the rest (16a8w logits at
    13 dB against float). Min-max keeps the range of every sample, as a static program needs."""
    from executorch.backends.qualcomm.quantizer.quantizer import QUANT_CONFIG_DICT
    from torchao.quantization.pt2e import MinMaxObserver

    from ..opdef import Role
    from ..quantizer import quant_dtype_of, quant_mode
    from ..quantizer.annotation import Override
    from .llm import llm_package, llm_quant_overrides

    ops = quant_dtype_of(quant_mode(quant_dtype).ops)
    spec = QUANT_CONFIG_DICT[(ops, False)][0](act_observer=MinMaxObserver).input_activation
    overrides = llm_quant_overrides()
    for op, inputs in _ACTIVATIONS.items():
        own: dict[tuple | str, Override] = {(Role.INPUT, i): spec for i in inputs}
        if op not in overrides:
            own.update({(Role.OUTPUT, o): spec for o in range(len(llm_package().ops[op].outputs))})
        overrides[op] = {**own, **overrides.get(op, {})}
    return overrides


def quantize_llm(
    programs: LlmPrograms,
    quant_dtype: str,
    prompts: Sequence[Sequence[int]],
    new_tokens: int,
    progress: Callable[[str], None] | None = None,
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """The prefill and decode programs converted by PT2E (``make_quantizer``, min-max observers,
    the KV-cache overrides), calibrated on the inputs float greedy generation from each prompt
    gives them, so the caches they observe are the ones they will carry. With
    ``cache="runner"`` each layer's K (and V) cache input and new rows share one encoding in
    both programs (``share_cache_encodings``), so a runner copies codes. ``quant_dtype`` is a
    ``QUANT_MODES`` name: 16a4w and 16a4w_block give the projections 4-bit weights and keep the
    ``lm_head`` at 16a8w, as ExecuTorch's Llama recipes do. ``progress`` hears one line per
    calibration prompt, with the time left at the pace so far."""
    from torchao.quantization.pt2e import MinMaxObserver
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from ..quantizer import make_quantizer
    from .llm import llm_binding

    float_step = eager_step(programs.prefill.module)  # one module computes both programs
    batch = programs.shape.batch
    groups = [list(prompts[i : i + batch]) for i in range(0, len(prompts), batch)]
    groups[-1] += list(itertools.islice(itertools.cycle(prompts), batch - len(groups[-1])))  # filled by the first
    runs = []
    started = time.monotonic()
    for index, group in enumerate(groups):
        if programs.shape.cache == "runner":
            runs.append(_runner_calibration(programs.shape, float_step, group[0], new_tokens))
        else:
            runs.append(greedy_batch(programs.shape, float_step, float_step, group, new_tokens, record=True)[0])
        if progress is not None:
            left = _time_left(time.monotonic() - started, index + 1, len(groups))
            progress(f"calibration: prompt {index + 1} of {len(groups)} generated in float{left}")
    prepared = []
    for program, samples in (
        (programs.prefill, [s for r in runs for s in r.prefill_inputs]),
        (programs.decode, [s for r in runs for s in r.decode_inputs]),
    ):
        quantizer = make_quantizer(
            llm_binding(),
            quant_dtype,
            min_max_overrides(quant_dtype),
            per_channel_linear=True,
            keep=_is_lm_head,
            act_observer=MinMaxObserver,
        )
        module = prepare_pt2e(program.exported.module(), quantizer)
        for sample in samples:
            module(*sample)
        prepared.append(module)
        if progress is not None:
            progress(f"calibration: {program.name} observed on {len(samples)} calls")
    if programs.shape.cache == "runner":
        share_cache_encodings(prepared, programs.shape)
    converted = (convert_pt2e(prepared[0]), convert_pt2e(prepared[1]))
    for module in converted:
        _drop_unused_tensors(module)
    _share_equal_tensors(converted)
    return converted


def _attribute(module: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    """The module holding the dotted attribute ``name``, and its last part."""
    owner, _, attr = name.rpartition(".")
    return (module.get_submodule(owner) if owner else module), attr


def _graph_tensors(module: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    """The tensors the graph reads (``get_attr``), by name."""
    found = {}
    for node in module.graph.nodes:
        if node.op == "get_attr":
            value = getattr(*_attribute(module, str(node.target)), None)
            if isinstance(value, torch.Tensor):
                found[str(node.target)] = value
    return found


def _drop_unused_tensors(module: torch.fx.GraphModule) -> None:
    """Forget the float weights ``convert_pt2e`` folded into codes but left on the module: a
    converted model holds its codes, and the float model can be freed (a 3B model's float32
    weights are 12 GB)."""
    used = set(_graph_tensors(module))
    for name, _ in [*module.named_parameters(), *module.named_buffers()]:
        if name not in used:
            delattr(*_attribute(module, name))


def _share_equal_tensors(modules: Sequence[torch.fx.GraphModule]) -> None:
    """Give a later module an earlier one's tensor wherever they hold equal ones (the codes of one
    weight, quantized alike for prefill and decode): each weight's codes held once."""
    equal = EqualTensors()
    for module in modules:
        for name, tensor in _graph_tensors(module).items():
            kept = equal.one_of(tensor)
            if kept is not tensor:
                setattr(*_attribute(module, name), kept)


def _time_left(elapsed: float, done: int, total: int) -> str:
    """``, about N s left`` at the pace so far (prompts take alike), or nothing when all are done."""
    return "" if done >= total else f", about {elapsed / done * (total - done):.0f} s left"


def _is_lm_head(node: torch.fx.Node) -> bool:
    """The logits' projection, the layer 4-bit modes keep at 8 bits (the one most sensitive:
    every logit goes through it)."""
    stack = list(node.meta.get("nn_module_stack", {}).values())
    return bool(stack) and stack[-1][0] == "lm_head"


def _runner_calibration(shape: LlmShape, step: Step, prompt: Sequence[int], new_tokens: int) -> Generation:
    """The calls float generation from ``prompt`` makes as the device runner runs it, then
    those of the prompt processor over the prompt and what it generated: a prefill chunk past
    the first attends to a filled cache, which a prompt of one chunk never shows the prefill
    program (calibrated without it, its cache scores clip: 85% top-1 agreement in 16a8w on a
    trained model, at the chunks' first rows)."""
    loop = RunnerLoop(shape, step, step)
    run = loop.generate(token_ids(prompt, shape.vocab, "quantize_llm: a prompt"), new_tokens, record=True)
    continued = [*prompt, *run.tokens][: shape.ctx_len - shape.prefill_len]
    if len(continued) > shape.prefill_len:
        loop.score(continued, record=True)
        assert loop.record is not None
        run.prefill_inputs.extend(loop.record[0])
    return run


def _input_observer(module: torch.fx.GraphModule, node: torch.fx.Node) -> torch.fx.Node:
    """The observer PT2E put on an input (its other users: the graph's guards, the ops)."""
    (observer,) = [u for u in node.users if u.op == "call_module" and "activation_post_process" in str(u.target)]
    return observer


def _cache_observers(module: torch.fx.GraphModule, shape: LlmShape) -> list[tuple[torch.fx.Node, torch.fx.Node]]:
    """Per K then V cache: (the observer of its input, the observer of its new rows' output)."""
    first_cache = 1 + shape.masks + 1  # tokens, masks, input_pos
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"][first_cache:]
    (output,) = [n for n in module.graph.nodes if n.op == "output"]
    return [(_input_observer(module, cache), rows) for cache, rows in zip(placeholders, output.args[0][1:])]


def share_cache_encodings(prepared: Sequence[torch.fx.GraphModule], shape: LlmShape) -> None:
    """One observer for each layer's K cache input and new K rows in every program, and the
    same for V: the cache input's kind (QNN's MatMul takes its second input symmetric), over
    the union of what all of them observed. A runner copying output codes into the cache, and
    one method's cache to the other's, then copies values (ExecuTorch's
    ``_encoding_override(..., override_kv_cache=True)`` ensures the same). Call it after
    calibration, before ``convert_pt2e``."""
    per_program = [_cache_observers(module, shape) for module in prepared]
    for index in range(2 * shape.layers):
        nodes = [(module, node) for module, pairs in zip(prepared, per_program) for node in pairs[index]]
        observers: list[Any] = [module.get_submodule(str(node.target)) for module, node in nodes]  # MinMaxObservers
        shared = copy.deepcopy(observers[0])
        shared.min_val.copy_(torch.stack([o.min_val for o in observers]).min())
        shared.max_val.copy_(torch.stack([o.max_val for o in observers]).max())
        name = f"activation_post_process_kv_{index}"
        for module, node in nodes:
            module.add_submodule(name, shared)
            node.target = name
    for module in prepared:
        module.recompile()
