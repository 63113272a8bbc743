"""Quantization-aware training of an LLM's programs through the library's ops.

``train_qat`` prepares a copy of the prefill program (``cache="runner"``) with
``prepare_qat_pt2e`` and ``make_quantizer(..., qat=True)``: the same annotation as PTQ's, with
fake quantizers where PTQ has observers -- the projections' 4-bit (or 8-bit) weights, per channel
or per block, the ``lm_head`` kept at 8 bits, the 16-bit activations, and the library's ops'
inputs and outputs as their OpDefs declare them. The copy's weights are then trained, their
gradients going through the fake quantizers (straight through the rounding) and the library's
ops' own backward formulas (``llm_ops.autograd``), on windows of the calibration text run as the
device runner runs a prompt (``RunnerLoop.score``: chunk after chunk, each chunk reading the
caches the earlier ones wrote). The loss is either the next token's cross-entropy, or the
distillation of the float program's logits on the same window (KL divergence, the float model
its own teacher). The user's model is never changed: the trained weights are new tensors,
which ``quantize_llm`` gives its PTQ-prepared programs before calibrating them as it always does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import UsageError
from ..progress import Progress, silent
from .hf import LlmPrograms
from .runner_loop import RunnerLoop

#: The training windows whose min and max set the activations' fake-quantization ranges.
CALIBRATION_WINDOWS = 16
#: The losses ``QatConfig.loss`` names.
LOSSES = ("distill", "next_token")


@dataclass(frozen=True)
class QatConfig:
    """How ``train_qat`` trains: ``steps`` Adam steps of ``lr`` (cosine-decayed to a tenth), one
    window of ``window`` tokens each (the longest a prompt may be: ``ctx_len - prefill_len``,
    when None) drawn, seeded, from the calibration text, with ``loss`` ``"distill"`` (KL from
    the float program's logits) or ``"next_token"`` (cross-entropy on the text). ``text``: token
    ids to train on instead of the calibration prompts (more text than a calibration needs)."""

    steps: int = 100
    lr: float = 1e-4
    loss: str = "distill"
    window: int | None = None
    seed: int = 0
    text: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise UsageError(f"QAT: steps is {self.steps}; train for 1 step or more")
        if self.loss not in LOSSES:
            raise UsageError(f"QAT: loss {self.loss!r}; use one of {', '.join(LOSSES)}")
        if not self.lr > 0:
            raise UsageError(f"QAT: learning rate {self.lr}; use a positive one")


def qat_config(qat: int | QatConfig | None) -> QatConfig | None:
    """``quantize_llm``'s ``qat``: a step count (the defaults otherwise), a config, or None."""
    if qat is None or isinstance(qat, QatConfig):
        return qat
    if isinstance(qat, bool) or not isinstance(qat, int):
        raise UsageError(f"QAT: qat={qat!r}; pass a number of steps or a QatConfig")
    return QatConfig(steps=qat)


def check_qat(qat: int | QatConfig, quant_dtype: str) -> QatConfig:
    """The config of ``qat`` for ``quant_dtype``, or one error: a mode executorch can train."""
    from ..quantizer import QUANT_MODES, trainable

    config = qat_config(qat)
    assert config is not None
    if not trainable(quant_dtype):
        raise UsageError(
            f"QAT: executorch has no quantization-aware config for {quant_dtype}; use "
            f"{', '.join(name for name in QUANT_MODES if trainable(name))}"
        )
    return config


def _copied_weights(module: torch.fx.GraphModule) -> dict[int, torch.nn.Parameter]:
    """Each parameter of ``module`` replaced by a copy (one copy per tensor, however many names
    it has: tied embeddings stay tied); the copies by the address of the weight they copy."""
    copies: dict[int, torch.nn.Parameter] = {}
    for name, parameter in list(module.named_parameters(remove_duplicate=False)):
        copy = copies.setdefault(parameter.data_ptr(), torch.nn.Parameter(parameter.detach().clone()))
        owner, _, attribute = name.rpartition(".")
        setattr(module.get_submodule(owner) if owner else module, attribute, copy)
    return copies


def training_windows(texts: Sequence[Sequence[int]], length: int, count: int, seed: int) -> list[list[int]]:
    """``count`` windows of ``length`` tokens from the texts one after another (repeated when
    shorter than a window), at seeded random offsets."""
    stream = [int(token) for text in texts for token in text]
    if not stream:
        raise UsageError("QAT: no calibration text to train on")
    while len(stream) < length + 1:
        stream = stream + stream
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(stream) - length + 1, (count,), generator=generator)
    return [stream[s : s + length] for s in starts.tolist()]


def _activation_fake_quantizers(prepared: torch.fx.GraphModule) -> dict[str, Any]:
    """The fake quantizers of ``prepared`` on activations (not on a weight's ``get_attr``), by name."""
    from torchao.quantization.pt2e.fake_quantize import FakeQuantizeBase

    found = {}
    for node in prepared.graph.nodes:
        if node.op != "call_module":
            continue
        module = prepared.get_submodule(str(node.target))
        source = node.args[0] if node.args else None
        weight = isinstance(source, torch.fx.Node) and source.op == "get_attr"
        if isinstance(module, FakeQuantizeBase) and not weight:
            found[str(node.target)] = module
    return found


def freeze_activation_ranges(prepared: torch.fx.GraphModule, run: Callable[[], object]) -> int:
    """Each activation fake quantizer's range set to the min and max of what it sees while
    ``run`` runs (passing values on unchanged meanwhile), then kept: PTQ's min-max ranges, not
    the moving average of the training windows a fused fake quantizer keeps, whose ranges from
    the first windows clip later ones and teach the weights to make up for a clipping the
    converted program does not have. The weights' fake quantizers keep following the weights.
    The count of the quantizers frozen."""
    quantizers = _activation_fake_quantizers(prepared)
    ranges: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def recorder(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
        def forward(x: torch.Tensor) -> torch.Tensor:
            low, high = torch.aminmax(x.detach().float())
            if name in ranges:
                low, high = torch.minimum(low, ranges[name][0]), torch.maximum(high, ranges[name][1])
            ranges[name] = (low, high)
            return x

        return forward

    for name, quantizer in quantizers.items():
        quantizer.forward = recorder(name)
    try:
        with torch.no_grad():
            run()
    finally:
        for quantizer in {id(q): q for q in quantizers.values()}.values():  # one module may serve two nodes
            del quantizer.forward
    for name, quantizer in quantizers.items():
        if name not in ranges:
            continue
        observer = quantizer.activation_post_process
        observer.min_val = ranges[name][0].reshape(observer.min_val.shape)
        observer.max_val = ranges[name][1].reshape(observer.max_val.shape)
        scale, zero_point = observer.calculate_qparams()
        quantizer.scale = scale.reshape(quantizer.scale.shape).to(quantizer.scale.dtype)
        quantizer.zero_point = zero_point.reshape(quantizer.zero_point.shape).to(quantizer.zero_point.dtype)
        quantizer.disable_observer()
    return len(ranges)


def _grad_step(module: torch.nn.Module) -> Callable[[tuple], list[torch.Tensor]]:
    return lambda inputs: list(module(*inputs))


def _no_decode(inputs: tuple) -> list[torch.Tensor]:
    raise AssertionError("QAT scores windows through the prefill program only")


def _loss(kind: str, logits: torch.Tensor, window: Sequence[int], teacher: torch.Tensor | None) -> torch.Tensor:
    if kind == "next_token":
        return torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(window[1:]))
    assert teacher is not None
    return torch.nn.functional.kl_div(
        torch.log_softmax(logits, -1), torch.log_softmax(teacher, -1), log_target=True, reduction="batchmean"
    )


def train_qat(
    programs: LlmPrograms,
    quant_dtype: str,
    texts: Sequence[Sequence[int]],
    config: QatConfig,
    quantizer: Any,
    progress: Progress = silent,
) -> dict[int, torch.Tensor]:
    """The prefill program's weights trained quantization-aware for ``quant_dtype``, by the
    address of the weight each replaces (``use_weights`` gives them to other programs), on
    windows of ``texts`` (token ids): the activations' ranges set on the first windows
    (``freeze_activation_ranges``), then ``config.steps`` steps. ``quantizer`` is
    ``make_quantizer(..., qat=True)``'s for the programs."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e

    shape = programs.shape
    if shape.cache != "runner":
        raise UsageError(f"QAT: programs of cache={shape.cache!r}; export them with cache='runner'")
    module = programs.prefill.exported.module()
    weights = _copied_weights(module)
    prepared = prepare_qat_pt2e(module, quantizer)
    length = min(config.window or shape.ctx_len - shape.prefill_len, shape.ctx_len - shape.prefill_len)
    windows = training_windows(texts if config.text is None else config.text, length, config.steps, config.seed)
    student = RunnerLoop(shape, _grad_step(prepared), _no_decode)
    frozen = freeze_activation_ranges(prepared, lambda: [student.score(w) for w in windows[:CALIBRATION_WINDOWS]])
    progress(f"QAT {quant_dtype}: {frozen} activation ranges set on {min(len(windows), CALIBRATION_WINDOWS)} windows")
    teacher = RunnerLoop(shape, _grad_step(programs.prefill.module), _no_decode)
    trained = [p for p in weights.values() if p.is_floating_point()]
    optimizer = torch.optim.Adam(trained, lr=config.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / config.steps))
    )
    started, reported = time.monotonic(), 0.0
    for step, window in enumerate(windows):
        target = None
        if config.loss == "distill":
            with torch.no_grad():
                target = teacher.score(window)
        loss = _loss(config.loss, student.score(window), window, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        elapsed = time.monotonic() - started
        if step + 1 == config.steps or elapsed - reported >= 10:
            reported = elapsed
            progress(
                f"QAT {quant_dtype}: step {step + 1} of {config.steps}, {config.loss} loss {float(loss.detach()):.4f} "
                f"({elapsed:.0f} s)"
            )
    return {address: weight.detach() for address, weight in weights.items()}


def use_weights(module: torch.fx.GraphModule, weights: dict[int, torch.Tensor]) -> None:
    """Each parameter of ``module`` holding a weight ``train_qat`` trained (by the weight's
    address, whatever name a program gives it) replaced by the trained tensor: the same tensor
    in every program, so each weight's codes are computed once."""
    replaced = 0
    for name, parameter in list(module.named_parameters(remove_duplicate=False)):
        trained = weights.get(parameter.data_ptr())
        if trained is not None:
            owner_path, _, attribute = name.rpartition(".")
            owner = module.get_submodule(owner_path) if owner_path else module
            setattr(owner, attribute, torch.nn.Parameter(trained, requires_grad=False))
            replaced += 1
    if not replaced:
        raise UsageError("QAT: the program holds none of the trained weights (was it exported from the same model?)")
