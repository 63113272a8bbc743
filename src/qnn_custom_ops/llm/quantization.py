"""PT2E quantization of the prefill and decode programs of ``export_llm`` (``quantize_llm``): the
LLM's quantizer (``llm_quantizer``: min-max observers, the ``lm_head`` and the parts kept at 8
bits), and calibration driven as ExecuTorch's device runner drives the programs. What follows
calibration is its own module: the conversion, each weight's codes made once for both methods
(``conversion``), and the caches' shared encodings, 8-bit KV caches included (``cache_encodings``)."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..progress import Progress, silent, time_left
from .cache_encodings import check_kv_bits
from .conversion import WeightCodes, convert_calibrated, convert_with_codes, module_attribute, observes_a_weight
from .generation import greedy_batch
from .hf import LlmExportError, LlmPrograms
from .parts import in_parts, resolve_kept
from .qat import QatConfig, qat_config, train_qat, use_weights
from .runner_loop import RunnerLoop
from .shapes import LlmShape
from .steps import Step, eager_step, token_ids

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

    from ..llm_ops.ops import llm_package, llm_quant_overrides
    from ..opdef import Role
    from ..quantizer import quant_dtype_of, quant_mode
    from ..quantizer.annotation import Override

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
    progress: Progress = silent,
    qat: int | QatConfig | None = None,
    kv_bits: int = 16,
    keep_8bit: Collection[str] = (),
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """The prefill and decode programs converted by PT2E (``make_quantizer``, min-max observers,
    the KV-cache overrides), calibrated on float greedy generation from each prompt, run through
    the prepared programs themselves: their observers pass values on unchanged, so each sees the
    inputs it will be given, caches included, and nothing is recorded (a 3B model's calibration
    calls held 4.5 GB of inputs). With ``cache="runner"`` calibration then covers every call the
    runner makes, however short the prompts (``_calibrate_context``), and each layer's K (and V)
    cache input and new rows share one encoding in both programs (``share_cache_encodings``), so
    a runner copies codes. ``quant_dtype`` is a ``QUANT_MODES`` name: 16a4w and 16a4w_block give the projections
    4-bit weights and keep the ``lm_head`` at 16a8w, as ExecuTorch's Llama recipes do.
    ``progress`` hears one line per calibration prompt, with the time left at the pace so far.

    ``qat`` (a number of steps, or a ``QatConfig``) first trains the weights quantization-aware
    on the prompts (``qat.train_qat``: the prefill program prepared with ``prepare_qat_pt2e`` and
    the same annotation, fake-quantized, distilled from the float program by default), then
    calibrates and converts the programs with the trained weights as above; the model passed in
    keeps its own weights.

    ``kv_bits=8`` (a mode of 16-bit activations, ``cache="runner"``) gives each layer's K and V
    caches, and the new rows the programs give, one 8-bit encoding (``share_cache_encodings``):
    half the cache memory, and a runner holds them as bytes (``get_kv_io_bit_width`` 8).

    ``keep_8bit`` names parts (``parts.resolve_kept``: ``layers.0.v_proj``, or ``v_proj`` for
    every layer's) a 4-bit mode keeps at 8-bit weights, as it keeps the ``lm_head``;
    ``sensitivity.choose_kept`` picks them to meet an accuracy target."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    check_kv_bits(kv_bits, quant_dtype)
    if kv_bits != 16 and programs.shape.cache != "runner":
        raise LlmExportError(f"kv_bits={kv_bits}: 8-bit caches need programs of cache='runner'")
    keep = kept_parts(keep_8bit, quant_dtype, programs)
    config = qat_config(qat)
    prepared = [
        prepare_pt2e(program.exported.module(), llm_quantizer(quant_dtype, keep_8bit=keep))
        for program in (programs.prefill, programs.decode)
    ]
    if config is not None:
        trained = train_qat(programs, quant_dtype, prompts, config, llm_quantizer(quant_dtype, True, keep), progress)
        for module in prepared:
            use_weights(module, trained)
    prefill, decode = (_CountedStep(eager_step(module)) for module in prepared)
    batch = programs.shape.batch
    groups = [list(prompts[i : i + batch]) for i in range(0, len(prompts), batch)]
    groups[-1] += list(itertools.islice(itertools.cycle(prompts), batch - len(groups[-1])))  # filled by the first
    started = time.monotonic()
    continued: list[list[int]] = []
    with _weights_observed_once(prepared):
        for index, group in enumerate(groups):
            if programs.shape.cache == "runner":
                continued.append(_runner_calibration(programs.shape, prefill, decode, group[0], new_tokens))
            else:
                greedy_batch(programs.shape, prefill, decode, group, new_tokens)
            left = time_left(time.monotonic() - started, index + 1, len(groups))
            progress(f"calibration: prompt {index + 1} of {len(groups)} observed{left}")
        if programs.shape.cache == "runner":
            _calibrate_context(programs.shape, prefill, decode, continued, progress)
    progress(f"calibration: prefill observed on {prefill.calls} calls, decode on {decode.calls}")
    return convert_calibrated(prepared, programs.shape, kv_bits)


def kept_parts(
    names: Collection[str], quant_dtype: str, programs: LlmPrograms
) -> Callable[[torch.fx.Node], bool] | None:
    """The predicate of the parts ``names`` keeps at 8-bit weights, None for none; refused in
    one line for a mode whose weights are 8 bits or more already."""
    from ..quantizer import quant_mode

    if not names:
        return None
    if quant_mode(quant_dtype).kept is None:
        raise LlmExportError(
            f"--keep-8bit: {quant_dtype} has no 4-bit weights to keep at 8 bits; use it with 16a4w or 16a4w_block"
        )
    return in_parts(resolve_kept(names, programs.prefill.exported.graph))


@contextlib.contextmanager
def _weights_observed_once(modules: Sequence[torch.fx.GraphModule]) -> Iterator[None]:
    """Each observer of a constant (a weight) observes it now, and passes values on unobserved
    within the block: a weight is the same on every calibration call, and its min and max,
    taken again per call, were a quarter of calibration's time."""
    observed = []
    for module in modules:
        for node in module.graph.nodes:
            if observes_a_weight(node):
                source = node.args[0]
                observer = module.get_submodule(str(node.target))
                observer(getattr(*module_attribute(module, str(source.target))))
                observer.forward = _passed_on
                observed.append(observer)
    try:
        yield
    finally:
        for observer in observed:
            del observer.forward  # the class's own again, for convert_pt2e


def _passed_on(value: torch.Tensor) -> torch.Tensor:
    return value


def llm_quantizer(quant_dtype: str, qat: bool = False, keep_8bit: Callable[[torch.fx.Node], bool] | None = None) -> Any:
    """The LlmOpPackage's quantizer for ``quant_dtype``: per-channel projections, min-max
    observers, the library's overrides, the ``lm_head`` (and the nodes ``keep_8bit`` accepts)
    kept at 8-bit weights. With ``qat`` the same annotation with executorch's fake quantizers
    (their own moving-average observers on activations: a fused fake quantizer takes no other)."""
    from torchao.quantization.pt2e import MinMaxObserver

    from ..llm_ops.ops import llm_binding, llm_quant_overrides
    from ..quantizer import make_quantizer

    keep = _is_lm_head if keep_8bit is None else lambda node: _is_lm_head(node) or keep_8bit(node)
    if qat:
        return make_quantizer(
            llm_binding(), quant_dtype, llm_quant_overrides(), per_channel_linear=True, keep=keep, qat=True
        )
    return make_quantizer(
        llm_binding(),
        quant_dtype,
        min_max_overrides(quant_dtype),
        per_channel_linear=True,
        keep=keep,
        act_observer=MinMaxObserver,
    )


def quantized_prefill(programs: LlmPrograms, quantizer: Any, windows: Sequence[Sequence[int]]) -> torch.fx.GraphModule:
    """The prefill program prepared with ``quantizer``, calibrated teacher-forced
    (``RunnerLoop.score``: the runner's prompt processor's calls) on each window, then on the
    windows one after another over the longest prompt the runner chunks, so every chunk is
    observed, however short the windows; converted. A quicker calibration than
    ``quantize_llm``'s, for comparing quantizations of one model (``sensitivity``), not for an
    export."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    shape = programs.shape
    prepared = prepare_pt2e(programs.prefill.exported.module(), quantizer)
    loop = RunnerLoop(shape, eager_step(prepared), eager_step(programs.decode.module))
    with _weights_observed_once([prepared]):
        for window in [*windows, context_tokens(windows, shape.ctx_len - shape.prefill_len)]:
            loop.score(window)
    return convert_with_codes(prepared, WeightCodes())


@dataclass
class _CountedStep:
    """A step that counts its calls (calibration says how many each program observed)."""

    step: Step
    calls: int = 0

    def __call__(self, inputs: tuple) -> Sequence[torch.Tensor]:
        self.calls += 1
        return self.step(inputs)


def _is_lm_head(node: torch.fx.Node) -> bool:
    """The logits' projection, the layer 4-bit modes keep at 8 bits (the one most sensitive:
    every logit goes through it)."""
    stack = list(node.meta.get("nn_module_stack", {}).values())
    return bool(stack) and stack[-1][0] == "lm_head"


#: ``kv_forward`` calls after each prefill chunk of calibration's pass over the context.
DECODES_PER_CHUNK = 4


def _runner_calibration(
    shape: LlmShape, prefill: Step, decode: Step, prompt: Sequence[int], new_tokens: int
) -> list[int]:
    """The calls float generation from ``prompt`` makes as the device runner runs it, then
    those of the prompt processor over the prompt and what it generated, when that passes one
    chunk; the prompt and what it generated. (The context's walk after all prompts covers every
    chunk too; without these its fewer prefill calls left 16a8w's worst position on a trained
    model at 21 dB, where they keep it at 31.)"""
    loop = RunnerLoop(shape, prefill, decode)
    prompt = token_ids(prompt, shape.vocab, "quantize_llm: a prompt")
    continued = [*prompt, *loop.generate(prompt, new_tokens).tokens]
    scored = continued[: shape.ctx_len - shape.prefill_len]
    if len(scored) > shape.prefill_len:
        loop.score(scored)
    return continued


def context_tokens(texts: Sequence[Sequence[int]], length: int) -> list[int]:
    """``length`` tokens: the texts one after another, from the first again until there are
    enough (calibration's stand-in for a prompt as long as the context)."""
    stream = [token for text in texts for token in text]
    return list(itertools.islice(itertools.cycle(stream), length)) if stream else []


def _calibrate_context(
    shape: LlmShape,
    prefill: Step,
    decode: Step,
    continued: Sequence[Sequence[int]],
    progress: Progress,
) -> None:
    """Every call the runner makes within the context, whatever the prompts' lengths: the
    prompts and their generated tokens one after another, repeated to ``ctx_len - 1`` tokens,
    walked by ``RunnerLoop.walk`` (the prefill program on an empty cache and on every later
    chunk's fuller one, the decode program after each chunk and up to the context's last
    position). Calibrated on one-chunk prompts only, the prefill program never saw a filled
    cache: its cache encodings clipped, and a prompt's second chunk scored -2 dB against float."""
    tokens = context_tokens(continued, shape.ctx_len - 1)
    RunnerLoop(shape, prefill, decode).walk(tokens, DECODES_PER_CHUNK)
    progress(
        f"calibration: the prompts and their continuations as one text of {len(tokens)} tokens, "
        f"every prefill chunk to ctx_len {shape.ctx_len} and {DECODES_PER_CHUNK} decode calls after each"
    )
