"""Quantizing a model read a layer at a time (``checkpoint_reading.load_by_layer``): PT2E
calibration run one stage at a time over every call of the calibration, where a stage is the
embedding and what the layers share (masks, RoPE angles), one decoder layer, or the final norm
and head.

The calls are those the device runner makes on the calibration text (``calibration_calls``:
``RunnerLoop``'s prompt processor, token generator and pass over the context, teacher-forced), so
the next token is never needed and no stage waits for a later one. For each stage the weights it
reads come from the store, each of its weights' observers sees its weight once, every call runs the
stage's nodes of its program (``prefill_forward`` or ``kv_forward``) on what earlier stages gave it,
and a layer's K and V caches are carried from call to call as the runner carries them
(``runner_loop.write_rows``); then the weights are given back. What a call keeps between stages is
what later stages read: the hidden state, the masks and angles. The next layer's inputs are the
float layer's outputs (the prepared program's observers pass values on unchanged), or with
``inputs="quantized"`` the quantized layer's (measured on the accuracy benchmark: float inputs as
good or better in every mode but one, by 0.2 point; they are the default).

Conversion then reads each weight from the store as it folds it into codes (``conversion.WeightCodes``), so
the float weights of the whole model are never held; nor are the two programs' codes of a weight.
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import torch

from ..progress import Progress, time_left
from .checkpoint_reading import OffloadedWeights
from .conversion import convert_calibrated
from .families import LlmExportError
from .hf import LlmPrograms
from .parts import layer_of
from .quantization import DECODES_PER_CHUNK, context_tokens, kept_parts, llm_quantizer
from .runner_loop import LoggedCall, RunnerLoop, write_rows
from .shapes import LlmShape

#: What the stage after a layer reads in calibration by layer: the float layer's outputs, or the
#: quantized layer's (``calibrate_by_layer``'s ``inputs``).
INPUTS = ("float", "quantized")


def _planned(shape: LlmShape, ar: int) -> Callable[[tuple], list[torch.Tensor]]:
    """A step that computes nothing, for ``calibration_calls``: outputs of a call's shapes (zero
    logits and rows), so the loop makes its calls and logs them."""
    k, v = shape.empty_cache()[0], shape.empty_cache()[-1]

    def step(inputs: tuple) -> list[torch.Tensor]:
        logits = torch.zeros(shape.batch, ar, shape.vocab)
        k_rows, v_rows = torch.zeros(*k.shape[:-1], ar), torch.zeros(*v.shape[:2], ar, v.shape[3])
        return [logits, *[k_rows] * shape.layers, *[v_rows] * shape.layers]

    return step


def calibration_calls(shape: LlmShape, prompts: Sequence[Sequence[int]], new_tokens: int) -> list[LoggedCall]:
    """The runner's calls of ``calibration_pass``, logged without computing anything."""
    loop = RunnerLoop(shape, _planned(shape, shape.prefill_len), _planned(shape, 1))
    loop.log = []
    calibration_pass(loop, prompts, new_tokens)
    return loop.log


def calibration_pass(loop: RunnerLoop, prompts: Sequence[Sequence[int]], new_tokens: int) -> None:
    """The runner's calls on the calibration text, teacher-forced: per prompt, its prefill and
    ``new_tokens`` ``kv_forward`` calls on the text that follows it (the next prompts), and the
    prompt processor over both where they pass one chunk; then ``RunnerLoop.walk`` over all of it
    repeated to the context's length (every chunk, and decode calls after each)."""
    shape = loop.shape
    continued = []
    for index, prompt in enumerate(prompts):
        following = context_tokens([*prompts[index + 1 :], *prompts[: index + 1]], new_tokens)
        loop.generate(prompt, len(following), forced=following)
        text = [*prompt, *following]
        if shape.prefill_len < len(text) <= shape.ctx_len - shape.prefill_len:
            loop.score(text)
        continued.append(text)
    loop.walk(context_tokens(continued, shape.ctx_len - 1), DECODES_PER_CHUNK)


def _inherits_stage(node: torch.fx.Node) -> bool:
    """Nodes run where their input is: observers, and the items of a tuple an op returned."""
    return node.op == "call_module" or (node.op == "call_function" and node.target is operator.getitem)


def _told_by_users(node: torch.fx.Node) -> bool:
    """Weights, and the observers of weights and inputs: run in the first stage that reads them."""
    return node.op == "get_attr" or (
        node.op == "call_module" and all(i.op in ("placeholder", "get_attr") for i in node.all_input_nodes)
    )


def stages_of(module: torch.fx.GraphModule, layers: int) -> dict[torch.fx.Node, int]:
    """Each node's stage: 0 before the layers, ``l + 1`` in layer ``l`` (``nn_module_stack``),
    ``layers + 1`` after them; checked so that no node reads a later stage's value."""
    stage: dict[torch.fx.Node, int] = {}
    by_users = []
    for node in module.graph.nodes:
        if node.op in ("placeholder", "output") or (node.op == "call_module" and not node.users):
            continue  # given, taken, or export's guard on the inputs' shapes (which these calls keep)
        if _told_by_users(node):
            by_users.append(node)
        elif _inherits_stage(node):
            stage[node] = stage.get(node.all_input_nodes[0], 0)
        elif (layer := layer_of(node)) is not None:
            stage[node] = layer + 1
        else:
            stage[node] = 0 if max((stage.get(i, 0) for i in node.all_input_nodes), default=0) == 0 else layers + 1
    for node in reversed(by_users):
        stage[node] = min((stage[u] for u in node.users if u in stage), default=0)
    for node, at in stage.items():
        late = [i for i in node.all_input_nodes if stage.get(i, 0) > at]
        if late:
            raise LlmExportError(
                f"calibration by layer: {node.name} (stage {at}) reads {late[0].name}, of a later stage"
            )
    return stage


def _is_weight(node: torch.fx.Node) -> bool:
    """A weight (``get_attr``), or an observer of one."""
    return node.op == "get_attr" or (
        node.op == "call_module" and bool(node.all_input_nodes) and node.all_input_nodes[0].op == "get_attr"
    )


def _weight_readers(module: torch.fx.GraphModule, stage: dict[torch.fx.Node, int]) -> dict[torch.fx.Node, set[int]]:
    """The stages that read each weight node: a weight two stages read (a tied embedding, the
    gather's and the ``lm_head``'s) is fetched again in each, where its weights are read from the
    store, not carried from the first, whose weights were given back when it ended."""
    readers: dict[torch.fx.Node, set[int]] = {}
    for node in reversed(module.graph.nodes):
        if _is_weight(node):
            readers[node] = set()
            for user in node.users:
                readers[node] |= readers[user] if user in readers else {stage[user]} if user in stage else set()
    return readers


class _StagedProgram:
    """One prepared program, run a stage at a time: its nodes by stage, its inputs, caches and
    new rows, and the last stage that reads each node's value."""

    def __init__(self, module: torch.fx.GraphModule, shape: LlmShape):
        self.module, self.shape = module, shape
        self.interpreter = torch.fx.Interpreter(module)
        stage = stages_of(module, shape.layers)
        readers = _weight_readers(module, stage)
        self.nodes = [
            [n for n in module.graph.nodes if stage.get(n) == s or s in readers.get(n, ())]
            for s in range(shape.layers + 2)
        ]
        placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
        first_cache = 1 + shape.masks + 1  # tokens, masks, input_pos
        self.inputs, self.caches = placeholders[:first_cache], placeholders[first_cache:]
        (output,) = [n for n in module.graph.nodes if n.op == "output"]
        self.rows: list[torch.fx.Node] = list(output.args[0][1:])
        self.last_read = {
            node: max((stage.get(u, stage.get(node, 0)) for u in node.users), default=0) for node in module.graph.nodes
        }

    def weights(self, stage: int) -> set[str]:
        """The tensors ``stage`` reads (``get_attr``), by name: what it needs read from the store."""
        return {str(n.target) for n in self.nodes[stage] if n.op == "get_attr"}

    def weight_observers(self, stage: int) -> list[tuple[torch.nn.Module, str]]:
        """The observers of weights in ``stage``, with the name of the weight each observes."""
        return [
            (self.module.get_submodule(str(n.target)), str(n.all_input_nodes[0].target))
            for n in self.nodes[stage]
            if n.op == "call_module" and _is_weight(n)
        ]

    def observers(self, stage: int) -> list[torch.nn.Module]:
        """Every observer ``stage`` runs: of its weights and of its values."""
        return [self.module.get_submodule(str(n.target)) for n in self.nodes[stage] if n.op == "call_module"]

    def run(self, stage: int, call: LoggedCall, env: dict, state: _LayerCaches) -> None:
        """``stage`` of ``call``: its nodes on what ``env`` holds; a layer's caches from ``state``, its
        new rows written back."""
        layers = self.shape.layers
        if stage == 0:
            env.update(zip(self.inputs, call.inputs))
        layer = stage - 1 if 1 <= stage <= layers else None
        if layer is not None:
            if call.fresh:
                state.clear(layer)
            ar = call.inputs[0].shape[1]
            env[self.caches[layer]], env[self.caches[layers + layer]] = self.shape.cache_read(*state.of(layer), ar)
        self.interpreter.env = env
        for node in self.nodes[stage]:
            env[node] = self.interpreter.run_node(node)
        if layer is not None:
            new_k, new_v = env[self.rows[layer]], env[self.rows[layers + layer]]
            write_rows(*state.of(layer), new_k, new_v, call.n_past, call.count)

    def forget(self, stage: int, env: dict) -> None:
        """Drop from ``env`` what no stage after ``stage`` reads."""
        for node in [n for n in env if self.last_read[n] <= stage]:
            del env[node]


@dataclass
class _LayerCaches:
    """The K and V caches of each layer as the runner holds them, carried call to call."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]

    @staticmethod
    def of_shape(shape: LlmShape) -> _LayerCaches:
        caches = shape.empty_cache()
        return _LayerCaches(caches[: shape.layers], caches[shape.layers :])

    def of(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[layer], self.v[layer]

    def clear(self, layer: int) -> None:
        self.k[layer].zero_()
        self.v[layer].zero_()


def put_tensor(module: torch.nn.Module, name: str, tensor: torch.Tensor) -> None:
    """``module``'s tensor ``name`` made ``tensor`` (a parameter keeps being one)."""
    owner_path, _, attr = name.rpartition(".")
    owner = module.get_submodule(owner_path) if owner_path else module
    current = getattr(owner, attr)
    if isinstance(current, torch.nn.Parameter):
        current.data = tensor
    else:
        setattr(owner, attr, tensor)


def calibrate_by_layer(
    prepared: Sequence[torch.fx.GraphModule],
    shape: LlmShape,
    calls: Sequence[LoggedCall],
    weights: OffloadedWeights,
    progress: Progress,
    inputs: str = "float",
) -> None:
    """Every observer of the prepared programs (prefill, decode) fed ``calls``, a stage at a time
    (see the module docstring); the weights read from ``weights`` a stage at a time. ``inputs``
    (``INPUTS``): what the next stage reads, the float stage's values or, with "quantized", the
    stage's values run again as the converted program will compute them (``_run_quantized``)."""
    if inputs not in INPUTS:
        raise LlmExportError(f"calibration by layer: inputs={inputs!r}; use one of {', '.join(INPUTS)}")
    programs = [_StagedProgram(module, shape) for module in prepared]
    envs: list[dict] = [{} for _ in calls]
    state = _LayerCaches.of_shape(shape)
    started = time.monotonic()
    stages = shape.layers + 2
    for stage in range(stages):
        observers = [(p, *o) for p in programs for o in p.weight_observers(stage)]
        names = {name for p in programs for name in p.weights(stage)} | {name for _, _, name in observers}
        loaded = {name: weights.read(name) for name in sorted(names) if name in weights}
        for name in loaded:  # no loop variable: it held the stage's last weight (a 3B's float32 table,
            for program in programs:  # 1.47 GiB) while the next stage read its own, the calibration's peak
                put_tensor(program.module, name, loaded[name])
        for program, observer, name in observers:  # each weight observed once, not once a call
            observer(loaded[name] if name in loaded else program.interpreter.fetch_attr(name))
            observer.forward = _passed_on
        _ranges_held_once([(observer, name) for _, observer, name in observers])
        with torch.no_grad():  # a value kept for later stages would hold this stage's weights in its graph
            for call, env in zip(calls, envs):
                programs[call.phase].run(stage, call, env, state)
                if inputs == "float":  # what no later stage reads (the head's logits: 16 MB a prefill call)
                    programs[call.phase].forget(stage, env)
        for _, observer, _ in observers:
            del observer.forward  # the class's own again, for convert_pt2e
        if inputs == "quantized":
            _run_quantized(programs, stage, calls, envs, state)
            for call, env in zip(calls, envs):
                programs[call.phase].forget(stage, env)
        for name in loaded:
            for program in programs:
                put_tensor(program.module, name, weights.placeholder(name))
        del loaded
        progress(
            f"calibration by layer: {_stage_name(stage, shape.layers)} observed on {len(calls)} calls"
            f"{time_left(time.monotonic() - started, stage + 1, stages)}"
        )


def _ranges_held_once(observers: Sequence[tuple[torch.nn.Module, str]]) -> None:
    """Each weight observer given the ranges (``min_val``, ``max_val``) of an earlier observer of the
    same weight where they are equal: prefill and decode observe each weight alike, and per block
    of 32 weights its minima and maxima are 0.25 bytes a weight a program (1.75 GB for an 8B model)."""
    earlier: dict[str, list[torch.nn.Module]] = {}
    for observer, name in observers:
        same = next((e for e in earlier.get(name, []) if _equal_ranges(e, observer)), None)
        if same is None:
            earlier.setdefault(name, []).append(observer)
        else:
            observer.min_val, observer.max_val = same.min_val, same.max_val


def _equal_ranges(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    ranges = [getattr(o, attr, None) for o in (a, b) for attr in ("min_val", "max_val")]
    if type(a) is not type(b):
        return False
    low, high, other_low, other_high = ranges
    return all(
        isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape and torch.equal(x, y)
        for x, y in ((low, other_low), (high, other_high))
    )


def _run_quantized(
    programs: Sequence[_StagedProgram], stage: int, calls: Sequence[LoggedCall], envs: list[dict], state: _LayerCaches
) -> None:
    """``stage`` run again over every call with each of its observers as its quantization
    (``fake_quant``): what later stages read, and the layer's caches, are then the quantized
    layer's. A weight's is computed once, not once a call."""
    from .fake_quant import fake_quantizer

    quantizing = {id(o): o for p in programs for o in p.observers(stage)}  # a shared observer once
    weights = {id(o) for p in programs for o, _ in p.weight_observers(stage)}
    for key, observer in quantizing.items():
        quantize = fake_quantizer(observer)
        observer.forward = functools.cache(quantize) if key in weights else quantize
    try:
        with torch.no_grad():
            for call, env in zip(calls, envs):
                programs[call.phase].run(stage, call, env, state)
    finally:
        for observer in quantizing.values():
            del observer.forward


def _stage_name(stage: int, layers: int) -> str:
    if stage == 0:
        return "the embedding"
    return f"layer {stage} of {layers}" if stage <= layers else "the head"


def _passed_on(value: torch.Tensor) -> torch.Tensor:
    return value


def quantize_by_layer(
    programs: LlmPrograms,
    weights: OffloadedWeights,
    quant_dtype: str,
    prompts: Sequence[Sequence[int]],
    new_tokens: int,
    progress: Progress,
    kv_bits: int = 16,
    keep_8bit: Collection[str] = (),
    inputs: str = "float",
    narrow: bool = False,
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """``quantization.quantize_llm`` for programs whose weights are in ``weights`` (read a layer at a
    time): calibrated a stage at a time on ``calibration_calls``, converted reading each weight as
    its codes are made (``narrow``: stored in their own width, ``convert_calibrated``'s); ``inputs``
    is ``calibrate_by_layer``'s. Quantization-aware training needs the whole model: not here."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    if programs.shape.cache != "runner":
        raise LlmExportError(f"quantize_by_layer: programs of cache={programs.shape.cache!r}; use cache='runner'")
    keep = kept_parts(keep_8bit, quant_dtype, programs)
    prepared = [
        prepare_pt2e(program.exported.module(), llm_quantizer(quant_dtype, keep_8bit=keep))
        for program in (programs.prefill, programs.decode)
    ]
    calls = calibration_calls(programs.shape, prompts, new_tokens)
    calibrate_by_layer(prepared, programs.shape, calls, weights, progress, inputs)
    return convert_calibrated(prepared, programs.shape, kv_bits, weights, narrow)
