"""Which parts of an LLM need more bits: ``llm analyze`` ranks the parts (``parts``) by what
quantizing each alone costs, and ``llm export --keep-8bit auto`` keeps the most sensitive ones
at 8-bit weights until an accuracy target is met.

Every measurement quantizes the prefill program only (``quantization.quantized_prefill``:
calibrated teacher-forced on the calibration windows, a quicker calibration than an export's
generation) and scores the text's windows through the runner's prompt processor against the
float program: the logits SQNR (the float logits' power over the difference's, every position
together) and the top-1 agreement. So a part's figures are its own cost, measured the way
``llm eval`` measures a whole export, and a choice of kept parts is checked, not estimated.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..progress import Progress, silent, time_left
from .hf import LlmPrograms
from .parts import in_parts, keepable, kind_parts, part_of, parts_in
from .quantization import llm_quantizer, quantized_prefill
from .runner_loop import RunnerLoop
from .steps import eager_step

#: Windows of token ids (each starting as a prompt does) the programs take whole.
Windows = Sequence[Sequence[int]]


@dataclass(frozen=True)
class Sensitivity:
    """What quantizing one part (or one kind in every layer, or everything: ``all``) costs."""

    part: str
    kind: str
    layer: int | None
    sqnr_db: float
    top1_agreement: float
    positions: int


@dataclass(frozen=True)
class KeptChoice:
    """``choose_kept``'s answer: the parts kept at 8-bit weights, most sensitive first, the
    top-1 agreement and SQNR with them kept, and whether that meets the target."""

    kept: tuple[str, ...]
    top1_agreement: float
    sqnr_db: float
    target: float
    reached: bool
    #: The kept parts' share of the weights the mode makes 4-bit (by parameters).
    weight_share: float


class _OnlyParts:
    """A quantizer annotating only the nodes ``holds`` accepts: the rest of the model stays
    float (a PT2E quantizer's ``annotate`` marks nodes; ``prepare_pt2e`` observes what is marked)."""

    def __init__(self, quantizer: Any, holds: Callable[[torch.fx.Node], bool]) -> None:
        self.quantizer, self.holds = quantizer, holds

    def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        return self.quantizer.transform_for_annotation(model)

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

        self.quantizer.annotate(model)
        for node in model.graph.nodes:
            if not self.holds(node):
                node.meta.pop(Q_ANNOTATION_KEY, None)
        _drop_shared_with_float(model.graph)
        return model

    def validate(self, model: torch.fx.GraphModule) -> None:
        self.quantizer.validate(model)

    def __getattr__(self, name: str) -> Any:  # the rest of the Quantizer protocol
        return getattr(self.quantizer, name)


def _quantized(edge_or_node: Any) -> bool:
    """Whether what a shared spec points at is still quantized: a node's output, or an edge
    (its user's input)."""
    from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

    if isinstance(edge_or_node, tuple):
        source, user = edge_or_node
        annotation = user.meta.get(Q_ANNOTATION_KEY)
        return annotation is not None and source in annotation.input_qspec_map
    annotation = edge_or_node.meta.get(Q_ANNOTATION_KEY)
    return annotation is not None and annotation.output_qspec is not None


def _drop_shared_with_float(graph: torch.fx.Graph) -> None:
    """Leave float every edge (and output) that shares an encoding with one left float, until
    none does: there is no encoding to share (a reshape after a float projection, then what
    shares with the reshape)."""
    from torchao.quantization.pt2e.quantizer import SharedQuantizationSpec
    from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

    def kept(spec: Any) -> bool:
        return not isinstance(spec, SharedQuantizationSpec) or _quantized(spec.edge_or_node)

    changed = True
    while changed:
        changed = False
        for node in graph.nodes:
            annotation = node.meta.get(Q_ANNOTATION_KEY)
            if annotation is None:
                continue
            inputs = {n: s for n, s in annotation.input_qspec_map.items() if kept(s)}
            output = annotation.output_qspec if kept(annotation.output_qspec) else None
            if len(inputs) != len(annotation.input_qspec_map) or output is not annotation.output_qspec:
                annotation.input_qspec_map, annotation.output_qspec, changed = inputs, output, True


class _Scorer:
    """The float program's logits over the text's windows, and a quantized program's figures
    against them."""

    def __init__(self, programs: LlmPrograms, windows: Windows) -> None:
        self.programs, self.windows = programs, windows
        self.reference = self.logits(programs.prefill.module)

    def logits(self, prefill: torch.nn.Module) -> torch.Tensor:
        loop = RunnerLoop(self.programs.shape, eager_step(prefill), eager_step(self.programs.decode.module))
        return torch.cat([loop.score(window) for window in self.windows])

    def figures(self, prefill: torch.nn.Module) -> tuple[float, float]:
        """(logits SQNR in dB, top-1 agreement) of ``prefill`` against the float program."""
        logits = self.logits(prefill).double()
        reference = self.reference.double()
        noise = float((reference - logits).pow(2).sum())
        sqnr = math.inf if noise == 0 else 10 * math.log10(float(reference.pow(2).sum()) / noise)
        return sqnr, float((logits.argmax(-1) == reference.argmax(-1)).double().mean())


def _groups(programs: LlmPrograms) -> list[tuple[str, str, int | None, frozenset[str]]]:
    """(name, kind, layer, part names) of what ``analyze`` measures: each part, each kind in
    every layer, and everything."""
    parts = parts_in(programs.prefill.exported.graph)
    groups = [(part.name, part.kind, part.layer, frozenset({part.name})) for part in parts]
    groups += [
        (f"{kind} (every layer)", kind, None, frozenset(p.name for p in members))
        for kind, members in kind_parts(parts).items()
    ]
    return [*groups, ("all", "all", None, frozenset(part.name for part in parts))]


def analyze(
    programs: LlmPrograms,
    quant_dtype: str,
    calibration: Windows,
    text: Windows,
    progress: Progress = silent,
) -> list[Sensitivity]:
    """Each part, each kind and the whole model quantized alone at ``quant_dtype`` (the rest
    float), calibrated on ``calibration`` and scored on ``text``: ranked by logits SQNR, the most
    sensitive first."""
    return _measured(programs, quant_dtype, calibration, _Scorer(programs, text), _groups(programs), progress)


def _measured(
    programs: LlmPrograms,
    quant_dtype: str,
    calibration: Windows,
    scorer: _Scorer,
    groups: Sequence[tuple[str, str, int | None, frozenset[str]]],
    progress: Progress,
) -> list[Sensitivity]:
    """Each group quantized alone, scored, ranked by SQNR (the lowest first)."""
    started = time.monotonic()
    found = []
    for done, (name, kind, layer, names) in enumerate(groups, 1):
        quantizer = _OnlyParts(llm_quantizer(quant_dtype), in_parts(names))
        sqnr, top1 = scorer.figures(quantized_prefill(programs, quantizer, calibration))
        found.append(Sensitivity(name, kind, layer, sqnr, top1, len(scorer.reference)))
        left = time_left(time.monotonic() - started, done, len(groups))
        progress(f"analyze: {done} of {len(groups)} quantized alone ({name}: {sqnr:.1f} dB, {top1:.1%}){left}")
    return sorted(found, key=lambda s: s.sqnr_db)


def choose_kept(
    programs: LlmPrograms,
    quant_dtype: str,
    calibration: Windows,
    text: Windows,
    target: float,
    progress: Progress = silent,
    ranking: Sequence[str] | None = None,
) -> KeptChoice:
    """The fewest of the most sensitive parts with 4-bit weights to keep at 8 bits so that the
    whole model at ``quant_dtype`` agrees with float on at least ``target`` of top-1 tokens of
    ``text``: the parts ranked by ``analyze`` (or ``ranking``), then a bisection over how many
    of the first are kept (agreement grows with what is kept; each try is one quantization of
    the prefill program and is measured, so the answer holds what it says). When keeping every
    one still misses the target, every one is kept and ``reached`` says so."""
    scorer = _Scorer(programs, text)
    if ranking is None:
        weighted = keepable(parts_in(programs.prefill.exported.graph))
        groups = [(part.name, part.kind, part.layer, frozenset({part.name})) for part in weighted]
        ranking = [s.part for s in _measured(programs, quant_dtype, calibration, scorer, groups, progress)]
    tried: dict[int, tuple[float, float]] = {}

    def figures(count: int) -> tuple[float, float]:
        if count not in tried:
            kept = in_parts(frozenset(ranking[:count]))
            tried[count] = scorer.figures(
                quantized_prefill(programs, llm_quantizer(quant_dtype, keep_8bit=kept), calibration)
            )
            sqnr, top1 = tried[count]
            progress(f"keep-8bit: {count} of {len(ranking)} parts kept: top-1 agreement {top1:.1%} ({sqnr:.1f} dB)")
        return tried[count]

    low, high = 0, len(ranking)
    if figures(low)[1] >= target:
        high = low
    elif figures(high)[1] >= target:
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if figures(middle)[1] >= target else (middle, high)
    sqnr, top1 = figures(high)
    counts = _weight_counts(programs.prefill.exported.graph)
    share = sum(counts.get(name, 0) for name in ranking[:high]) / max(1, sum(counts.values()))
    return KeptChoice(tuple(ranking[:high]), top1, sqnr, target, top1 >= target, share)


def _weight_counts(graph: torch.fx.Graph) -> dict[str, int]:
    """The parameters of each part with 4-bit weights (its projections'), told by the traced shapes."""
    weighted = {part.name for part in keepable(parts_in(graph))}
    counts: dict[str, int] = {}
    for node in graph.nodes:
        part = part_of(node)
        if part is None or part.name not in weighted:
            continue
        counts[part.name] = counts.get(part.name, 0) + node.args[1].meta["val"].numel()
    return counts
