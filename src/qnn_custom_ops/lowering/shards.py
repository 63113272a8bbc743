"""A decoder's QNN lowering split into shards of consecutive layers: one QNN context per shard.

QNN's HTP refuses to finalize a graph whose estimated allocation passes 2 GiB ("graph requires
estimated allocation of 2309576 KB, limit is 2097152 KB", ExecuTorch issue #17782, Qwen3-1.7B at
16a8w in one context; the same message is in QAIRT 2.51's x86 ``libQnnHtp.so``), and a phone may
refuse to map a context's weights well before (``fastrpc memory map ... length: 1145044992
failed``, ExecuTorch PR #4923, which brought ``num_sharding``). ExecuTorch's ``num_sharding``
inserts a CPU op (``llama.fallback``) between layer groups so the partitioner stops there; here
the partitioner itself cuts its partitions where the layers' groups change (``split_partitions``),
so the shards' contexts follow one another inside each method with nothing on the CPU between
them, and the tensor crossing a cut stays as codes (``QCOM_QUANTIZED_IO``), as ExecuTorch tags
its sharding IO. A runner sees the same methods, inputs and outputs: several delegates in one
method are ExecuTorch's runtime's business, not the runner's.

A node's layer is the ``layers.N`` in the module it was traced in (``nn_module_stack``); a node
outside the layers goes with what it reads (the final norm and ``lm_head`` with the last layer),
or, reading nothing a layer made (the embedding, the mask's and RoPE's preparation, a weight's
dequantize), with the first shard that uses it. Every edge then goes from a shard to the same or
a later one, so cutting a partition by shard makes no cycle.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from executorch.backends.qualcomm.utils.constants import QCOM_QUANT_ATTRS, QCOM_QUANTIZED_IO
from torch.fx.passes.infra.partitioner import Partition

from ..errors import UsageError
from .quantized_io import RUNNER_CODE_DTYPES

#: QNN HTP's limit on a graph's estimated allocation (weights, I/O, activations, run list).
CONTEXT_LIMIT = 2 * 1024**3
#: What the default shard count lets one context's weights take: half the limit, the rest for
#: its I/O (caches, masks), activations and spill-fill. In #17782 the weights were about 73 %
#: of the estimate (1.72 GB of 8-bit weights, 2.37 GB estimated), so a whole limit of weights
#: would have left that model in one context, over the limit.
WEIGHT_BUDGET = CONTEXT_LIMIT // 2

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


def layer_of(node: torch.fx.Node) -> int | None:
    """The decoder layer ``node`` was traced in (``...layers.N...`` in its module path), else None."""
    stack = list(node.meta.get("nn_module_stack", {}).values())
    match = _LAYER.search(str(stack[-1][0])) if stack else None
    return int(match.group(1)) if match else None


def layers_in(graph: torch.fx.Graph) -> int:
    """How many decoder layers ``graph`` holds (0 for a graph with none)."""
    return 1 + max((layer for node in graph.nodes if (layer := layer_of(node)) is not None), default=-1)


@dataclass(frozen=True)
class LayerShards:
    """``layers`` decoder layers in shards of consecutive layers, each starting at its layer in
    ``starts`` (the first at 0)."""

    layers: int
    starts: tuple[int, ...]

    @staticmethod
    def even(layers: int, count: int) -> LayerShards:
        """``count`` shards as even as they go (sizes differ by one at most; ExecuTorch's
        ``num_sharding`` needs ``count`` to divide the layers)."""
        check_shard_count(count, layers)
        return LayerShards(layers, tuple(-(-s * layers // count) for s in range(count)))

    @property
    def count(self) -> int:
        return len(self.starts)

    def of_layer(self, layer: int) -> int:
        return bisect.bisect_right(self.starts, layer) - 1

    def sizes(self) -> tuple[int, ...]:
        """Layers per shard, in order."""
        return tuple(end - start for start, end in zip(self.starts, (*self.starts[1:], self.layers)))

    def held(self, layer_bytes: Sequence[int]) -> tuple[int, ...]:
        """Each shard's bytes, of the layers' ``layer_bytes``."""
        return tuple(sum(layer_bytes[start : start + size]) for start, size in zip(self.starts, self.sizes()))


def check_shard_count(count: int, layers: int) -> None:
    """One line for a count that cannot split ``layers`` layers."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= max(layers, 1):
        raise UsageError(f"--shards {count!r}: give 1 to {layers}, the model's layers (a shard holds whole layers)")


def node_shards(graph: torch.fx.Graph, shard_of_layer: Callable[[int], int]) -> dict[torch.fx.Node, int]:
    """Each node's shard: its layer's, and never before what it reads; a node outside the layers
    with what it reads, or, reading nothing a layer made, with the first shard that uses it."""
    shards: dict[torch.fx.Node, int] = {}
    free: list[torch.fx.Node] = []
    for node in graph.nodes:
        if node.op == "output":
            continue
        read = [shards[n] for n in node.all_input_nodes if n in shards]
        layer = layer_of(node)
        if layer is None and not read:
            free.append(node)
            continue
        shards[node] = max([*read, *([] if layer is None else [shard_of_layer(layer)])])
    for node in reversed(free):  # users first
        shards[node] = min((shards[u] for u in node.users if u in shards), default=0)
    return shards


def split_partitions(partitions: Iterable[Partition], shards: dict[torch.fx.Node, int]) -> list[Partition]:
    """Each partition cut where its nodes' shards change, numbered anew; a quantized tensor one
    piece gives another crosses as codes (``codes_across``)."""
    pieces: dict[tuple[int, int], list[torch.fx.Node]] = {}
    for index, partition in enumerate(partitions):
        for node in partition.nodes:
            pieces.setdefault((shards.get(node, 0), index), []).append(node)
    ordered = [nodes for _, nodes in sorted(pieces.items(), key=lambda piece: piece[0])]
    codes_across(ordered)
    return [Partition(id=i, nodes=nodes) for i, nodes in enumerate(ordered)]


def codes_across(pieces: Sequence[Sequence[torch.fx.Node]]) -> None:
    """Tag each quantized node read by another piece than its own as quantized IO (its codes'
    unsigned width, ``quantized_io.RUNNER_CODE_DTYPES``): the two contexts pass codes, without a
    dequantize to float in one and a quantize in the other, as ExecuTorch tags its sharding IO."""
    piece_of = {node: index for index, nodes in enumerate(pieces) for node in nodes}
    for node, index in piece_of.items():
        attrs = node.meta.get(QCOM_QUANT_ATTRS)
        crosses = any(piece_of.get(user, index) != index for user in node.users)
        if attrs and crosses and QCOM_QUANTIZED_IO not in node.meta:
            bits = (int(attrs["quant_max"]) - int(attrs["quant_min"])).bit_length()
            node.meta[QCOM_QUANTIZED_IO] = RUNNER_CODE_DTYPES[bits]


def weight_bytes_per_layer(program: torch.export.ExportedProgram) -> tuple[int, ...]:
    """The bytes of weights each layer's context holds, what precedes the layers (the embedding)
    counted in the first and what follows them (``lm_head``) in the last: a quantized weight at
    its codes' bits (4-bit codes are half a byte), a float one at 16 bits (HTP's fp16); a weight
    two layers read, in both."""
    graph = program.graph
    layers = layers_in(graph)
    if layers == 0:
        return ()
    shards = node_shards(graph, lambda layer: layer)  # a shard per layer
    tensors = {**program.state_dict, **program.constants}
    names = {
        **program.graph_signature.inputs_to_parameters,
        **program.graph_signature.inputs_to_buffers,
        **program.graph_signature.inputs_to_lifted_tensor_constants,
    }
    per_layer = [0] * layers
    for node in graph.nodes:
        tensor = tensors.get(names.get(node.name, ""))
        if node.op != "placeholder" or not isinstance(tensor, torch.Tensor):
            continue
        bits = _stored_bits(node, tensor)
        for layer in {shards[u] for u in node.users if u in shards}:
            per_layer[layer] += tensor.numel() * bits // 8
    return tuple(per_layer)


def _stored_bits(node: torch.fx.Node, tensor: torch.Tensor) -> int:
    """A weight's bits in a context: its dequantize's range, else 16 for float, else its own."""
    for user in node.users:
        low, high = _argument(user, "quant_min"), _argument(user, "quant_max")
        if "dequantize" in str(user.target) and isinstance(low, int) and isinstance(high, int):
            return max(1, (high - low).bit_length())
    return 16 if tensor.is_floating_point() else tensor.element_size() * 8


def _argument(node: torch.fx.Node, name: str) -> object:
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return None
    for index, argument in enumerate(schema.arguments):
        if argument.name == name:
            return node.kwargs.get(name, node.args[index] if index < len(node.args) else None)
    return None


def shards_within(layer_bytes: Sequence[int], budget: int = WEIGHT_BUDGET) -> LayerShards:
    """The fewest shards of consecutive layers whose contexts each hold at most ``budget`` bytes of
    weights (a layer alone over it, the first with a large embedding, is a shard of its own), the
    largest as small as that many shards allow."""
    count = len(_filled(layer_bytes, budget))
    low, high = 1, max(sum(layer_bytes), 1)
    while low < high:  # the least cap that still fills no more than count shards
        middle = (low + high) // 2
        low, high = (low, middle) if len(_filled(layer_bytes, middle)) <= count else (middle + 1, high)
    return LayerShards(max(len(layer_bytes), 1), _filled(layer_bytes, high))


def _filled(layer_bytes: Sequence[int], cap: int) -> tuple[int, ...]:
    """The first layer of each shard, filling each in order as far as ``cap`` goes."""
    starts, held = [0], 0
    for layer, size in enumerate(layer_bytes):
        if held and held + size > cap:
            starts.append(layer)
            held = 0
        held += size
    return tuple(starts)
