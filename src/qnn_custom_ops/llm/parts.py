"""The parts of a static LLM program that quantization can treat apart: what ``llm analyze``
ranks and ``llm export --keep-8bit`` names.

A node's part is told by the module it was traced in (``nn_module_stack``) and what it calls:
each layer's attention projections by their own names (``q_proj``, ``k_proj``, ``v_proj``,
``o_proj``, or a family's fused ``qkv_proj``), its MLP's projections together (``mlp``), its
library ops (``ops``: the norms, RoPE, the gated activation), and the rest of its activations
(``activations``: attention's matmuls and softmax, the residual adds); outside the layers the
``embedding`` (its table quantized as activations are: 16 bits in a 16-bit mode), the
``lm_head``, the final norm (by its module's name) and the other activations. A 4-bit mode gives
the projections 4-bit weights: those are the parts ``--keep-8bit`` can keep at 8.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

import torch

from .families import LlmExportError

_LAYER = re.compile(r"^layers\.(\d+)(?:\.|$)")
_WEIGHTED: dict[object, str] = {torch.ops.aten.linear.default: "linear", torch.ops.aten.embedding.default: "embedding"}
#: The namespace of the library's ops (``llm.llm_ops``).
OPS_NAMESPACE = "qco_llm"


@dataclass(frozen=True)
class Part:
    """One part: its name (``layers.3.v_proj``, ``lm_head``), its kind (``v_proj``), its layer
    (None outside the layers), and whether a 4-bit mode makes its weights 4-bit."""

    name: str
    kind: str
    layer: int | None
    four_bit_weights: bool


def _module_path(node: torch.fx.Node) -> str:
    stack = list(node.meta.get("nn_module_stack", {}).values())
    return str(stack[-1][0]) if stack else ""


def layer_of(node: torch.fx.Node) -> int | None:
    """The decoder layer ``node`` was traced in (``layers.N``), None outside the layers."""
    match = _LAYER.match(_module_path(node))
    return int(match.group(1)) if match else None


def _is_library_op(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "namespace", None) == OPS_NAMESPACE


def part_of(node: torch.fx.Node) -> Part | None:
    """The part ``node`` belongs to, None for what no quantization touches (inputs, weights'
    ``get_attr``, the output)."""
    if node.op != "call_function":
        return None
    path = _module_path(node)
    layer = layer_of(node)
    prefix = f"layers.{layer}." if layer is not None else ""
    weighted = _WEIGHTED.get(node.target)
    if weighted == "embedding":
        return Part("embedding", "embedding", None, False)
    if weighted == "linear":
        if layer is None:
            return Part("lm_head", "lm_head", None, True) if path == "lm_head" else Part(path, path, None, True)
        kind = "mlp" if ".mlp." in f".{path}." else path.rsplit(".", 1)[-1]
        return Part(prefix + kind, kind, layer, True)
    kind = "ops" if _is_library_op(node) else "activations"
    if layer is None:
        return Part(path if kind == "ops" and path else f"{kind} (outside the layers)", kind, None, False)
    return Part(prefix + kind, kind, layer, False)


def parts_in(graph: torch.fx.Graph) -> list[Part]:
    """Every part of ``graph`` once, in the graph's order."""
    return list(dict.fromkeys(part for node in graph.nodes if (part := part_of(node)) is not None))


def kind_parts(parts: Iterable[Part]) -> dict[str, list[Part]]:
    """The parts by kind, for kinds found in more than one layer (``v_proj``: every layer's)."""
    by_kind: dict[str, list[Part]] = {}
    for part in parts:
        by_kind.setdefault(part.kind, []).append(part)
    return {kind: members for kind, members in by_kind.items() if len(members) > 1}


def keepable(parts: Iterable[Part]) -> list[Part]:
    """The parts ``--keep-8bit`` may name: those with 4-bit weights (the ``lm_head`` is kept
    at 8 bits always)."""
    return [part for part in parts if part.four_bit_weights and part.kind != "lm_head"]


def resolve_kept(names: Collection[str], graph: torch.fx.Graph, option: str = "--keep-8bit") -> frozenset[str]:
    """The part names ``names`` means in ``graph``: a part's name, or a kind naming every layer's
    part of that kind. Refused in one line for a name that is neither, listing what is."""
    parts = keepable(parts_in(graph))
    by_name: dict[str, set[str]] = {part.name: {part.name} for part in parts}
    kinds = [part.kind for part in parts]
    for part in parts:
        by_name.setdefault(part.kind, set()).add(part.name)
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise LlmExportError(
            f"{option} {','.join(unknown)}: no such part with 4-bit weights; name parts "
            f"({', '.join(p.name for p in parts[:4])}, ...) or kinds ({', '.join(dict.fromkeys(kinds))}); "
            "`qnn-custom-ops llm analyze` lists them"
        )
    return frozenset(name for given in names for name in by_name[given])


def in_parts(names: Collection[str]) -> Callable[[torch.fx.Node], bool]:
    """A node predicate: whether the node belongs to one of the parts ``names``."""

    def holds(node: torch.fx.Node) -> bool:
        part = part_of(node)
        return part is not None and part.name in names

    return holds
