"""The KV caches' encodings (``share_cache_encodings``): each layer's K (and V) cache input and
new rows share one encoding in both programs, 16 bits or 8 (``kv_bits``), so that a runner copies
codes from one call to the next."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from .hf import LlmExportError
from .shapes import LlmShape


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


#: The cache widths ``quantize_llm``'s ``kv_bits`` takes.
KV_BITS = (8, 16)


def check_kv_bits(kv_bits: int, quant_dtype: str) -> None:
    """8 or 16; 8 only under a mode of 16-bit activations (8a8w's caches are 8-bit already)."""
    if kv_bits not in KV_BITS:
        raise LlmExportError(f"kv_bits={kv_bits!r}: the caches are 16-bit (the default) or 8-bit; pass 16 or 8")
    if kv_bits == 8 and not quant_dtype.startswith("16a"):
        raise LlmExportError(
            f"kv_bits=8 under {quant_dtype}: 8-bit caches are for modes of 16-bit activations "
            "(16a8w, 16a16w, 16a4w, 16a4w_block)"
        )


def _cache_observer(like: Any, kv_bits: int) -> Any:
    """The shared observer of a cache: a copy of its input's (16 bits), or at 8 bits of the same
    kind -- signed, symmetric (-127...127, zero at code 0, as QNN's MatMul takes its second input
    and as ExecuTorch's ``annotate_kv_8bit`` gives 16a8w's caches)."""
    if kv_bits == 16:
        return copy.deepcopy(like)
    from torchao.quantization.pt2e import MinMaxObserver

    symmetric = like.qscheme == torch.per_tensor_symmetric
    low, high = (-127, 127) if symmetric else (-128, 127)
    return MinMaxObserver(dtype=torch.int8, qscheme=like.qscheme, quant_min=low, quant_max=high, eps=like.eps)


def share_cache_encodings(prepared: Sequence[torch.fx.GraphModule], shape: LlmShape, kv_bits: int = 16) -> None:
    """One observer for each layer's K cache input and new K rows in every program, and the
    same for V: the cache input's kind (QNN's MatMul takes its second input symmetric), over
    the union of what all of them observed. A runner copying output codes into the cache, and
    one method's cache to the other's, then copies values (ExecuTorch's
    ``_encoding_override(..., override_kv_cache=True)`` ensures the same). With ``kv_bits`` 8
    the shared encoding is 8-bit (``_cache_observer``): the caches the programs take and the
    new rows they give, in both methods. Call it after calibration, before ``convert_pt2e``."""
    per_program = [_cache_observers(module, shape) for module in prepared]
    for index in range(2 * shape.layers):
        nodes = [(module, node) for module, pairs in zip(prepared, per_program) for node in pairs[index]]
        observers: list[Any] = [module.get_submodule(str(node.target)) for module, node in nodes]  # MinMaxObservers
        shared = _cache_observer(observers[0], kv_bits)
        shared.min_val.copy_(torch.stack([o.min_val for o in observers]).min())
        shared.max_val.copy_(torch.stack([o.max_val for o in observers]).max())
        name = f"activation_post_process_kv_{index}"
        for module, node in nodes:
            module.add_submodule(name, shared)
            node.target = name
            _encoded_before_moving(module, node)
    for module in prepared:
        module.recompile()


#: Ops that only move data: QNN validates them with one datatype in and out.
_DATA_MOVEMENT = frozenset({torch.ops.aten.transpose.int, torch.ops.aten.permute.default})


def _encoded_before_moving(module: torch.fx.GraphModule, observer: torch.fx.Node) -> None:
    """The cache's encoding applied before the transpose that makes the new rows as well as
    after it: the rows come in as RoPE's (or a projection's) unsigned 16-bit codes and the cache
    is signed (QNN's MatMul takes its second input symmetric), and QNN refuses a Transpose whose
    input and output datatypes differ ("mismatching datatypes. 0x416 != 0x316", error 3110,
    measured with ExecuTorch's QnnPartitioner on QAIRT 2.51). The same values either way."""
    moved = observer.args[0]
    if not isinstance(moved, torch.fx.Node) or moved.target not in _DATA_MOVEMENT:
        return
    source = moved.args[0]
    assert isinstance(source, torch.fx.Node)  # a transpose's input is a tensor
    with module.graph.inserting_before(moved):
        before = module.graph.call_module(str(observer.target), (source,))
    moved.replace_input_with(source, before)
