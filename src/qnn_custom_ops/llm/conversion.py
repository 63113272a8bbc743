"""The calibrated prefill and decode programs converted (``convert_calibrated``): each weight's
codes made once for both programs and held once, block scales on QNN's grid, the observers' ranges
let go as soon as they are read, and the codes stored in their own width as they are made where
the host program keeps codes (``lowering.codes_width``)."""

from __future__ import annotations

import collections
import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from ..lowering.codes_width import (
    StoredCodes,
    block_parameters_stored,
    constant_nodes,
    dequantize_parameters_stored,
    read_as_stored,
    stored_codes,
    stored_in_rows,
)
from ..lowering.weight_sharing import EqualTensors, TensorBackedData
from .cache_encodings import share_cache_encodings
from .shapes import LlmShape


def convert_calibrated(
    prepared: Sequence[torch.fx.GraphModule],
    shape: LlmShape,
    kv_bits: int = 16,
    offloaded: Any = None,
    narrow: bool = False,
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """The calibrated prefill and decode programs converted (``convert_with_codes``), their caches' encodings
    shared first (``share_cache_encodings``), each weight's codes made once and held once; the
    weights ``offloaded`` holds (``checkpoint_reading.OffloadedWeights``) read from it as needed.
    ``narrow``: the codes stored in their own width as they are made (``WeightCodes``), for a host
    program that keeps its codes (``lower_methods(..., fold_weights=False)``); QNN's lowering and
    the folding of weights read codes as PT2E makes them."""
    if shape.cache == "runner":
        share_cache_encodings(prepared, shape, kv_bits)
    codes = WeightCodes(offloaded, narrow)
    _ranges_let_go_once_read(prepared)
    converted = (convert_with_codes(prepared[0], codes), convert_with_codes(prepared[1], codes))
    _share_equal_tensors(converted)
    _forget_prepared_modules()
    return converted


def _ranges_let_go_once_read(modules: Sequence[torch.fx.GraphModule]) -> None:
    """Each weight observer lets go of its ranges (``min_val``, ``max_val``) as soon as conversion
    has read its quantization parameters (``_RangesReadOnce``): per block of 32 weights they are
    0.25 bytes a weight (1.75 GB for an 8B model), and were held until both programs were
    converted. Asked once more than it serves nodes, an observer fails (torchao's own check) rather
    than answer from nothing."""
    uses: collections.Counter[int] = collections.Counter()
    weight_observers: dict[int, Any] = {}
    for module in modules:
        for node in module.graph.nodes:
            if node.op == "call_module":
                observer = module.get_submodule(str(node.target))
                uses[id(observer)] += 1
                if observes_a_weight(node) and hasattr(observer, "min_val") and hasattr(observer, "max_val"):
                    weight_observers[id(observer)] = observer
    groups: dict[tuple, list[Any]] = {}
    for observer in weight_observers.values():
        key = (id(observer.min_val), id(observer.max_val), _configuration(observer))
        groups.setdefault(key, []).append(observer)
    for observers in groups.values():
        _RangesReadOnce(observers, sum(uses[id(o)] for o in observers))


def observes_a_weight(node: torch.fx.Node) -> bool:
    """Whether ``node`` calls an observer on a constant (a ``get_attr``): a weight's observer."""
    source = node.args[0] if node.op == "call_module" and len(node.args) == 1 else None
    return isinstance(source, torch.fx.Node) and source.op == "get_attr"


def _configuration(observer: torch.nn.Module) -> tuple:
    """What an observer computes its parameters with besides its ranges (its public settings)."""
    settings = vars(observer).items()
    return tuple(sorted((k, repr(v)) for k, v in settings if not k.startswith("_") and not isinstance(v, torch.Tensor)))


class _RangesReadOnce:
    """The observers of one weight that hold the same ranges (prefill's and decode's:
    ``layer_stages._ranges_held_once``) with one configuration: the first asked computes the
    parameters and all of them let the ranges go; the others are given those parameters, all-zero
    zero points kept as their shape (the scales alone are half the ranges' bytes, and are held
    only until the last of the observers is converted)."""

    def __init__(self, observers: list[Any], uses: int) -> None:
        self._observers, self._left = observers, uses
        self._qparams: tuple[torch.Tensor, Any] | None = None
        compute = observers[0].calculate_qparams
        for observer in observers:
            observer.calculate_qparams = functools.partial(self.calculate_qparams, compute)

    def calculate_qparams(self, compute: Callable[[], tuple]) -> tuple[torch.Tensor, torch.Tensor]:
        if self._left == 0:
            return compute()  # the ranges are gone: torchao's own check says so
        if self._qparams is None:
            scale, zero_point = compute()
            for observer in self._observers:
                del observer.min_val, observer.max_val
            all_zero = isinstance(zero_point, torch.Tensor) and not torch.count_nonzero(zero_point)
            self._qparams = (scale, zero_point if not all_zero else (zero_point.shape, zero_point.dtype))
        scale, zero_point = self._qparams
        self._left -= 1
        if self._left == 0:
            self._qparams = None
        return scale, torch.zeros(zero_point[0], dtype=zero_point[1]) if isinstance(zero_point, tuple) else zero_point


def _forget_prepared_modules() -> None:
    """Empty the two caches of each module's device that prepare and convert call with the module,
    both unbounded ``functools.cache``s: torchao's (``torchao.utils._assert_and_get_unique_device``)
    and torch's (``torch.ao.quantization.fx.utils.assert_and_get_unique_device``, which torchao's
    prepare reaches through torch's ``_insert_obs_or_fq``). They kept every prepared program alive
    after conversion: each weight observer's ranges (at 16a4w_block, a minimum and a maximum per
    block of 32 weights, per program: 0.5 bytes a weight, 3.5 GB for an 8B model), and the
    converted graphs (converted in place) through lowering."""
    from torch.ao.quantization.fx import utils as torch_utils
    from torchao import utils

    utils._assert_and_get_unique_device.cache_clear()
    torch_utils.assert_and_get_unique_device.cache_clear()


def convert_with_codes(prepared: torch.fx.GraphModule, codes: WeightCodes) -> torch.fx.GraphModule:
    """``convert_pt2e`` with per-block weight scales as QNN stores them (``block_scales``) and the
    weights' quantization folded by ``codes``: each weight's codes
    computed once for every program. torchao's folding would quantize them again per program,
    and evaluates every constant subgraph on the way, dequantized weights included (with a 3B
    model: two programs' codes and a float copy beside the float weights); it runs only where a
    quantize of a constant is left that ``codes`` does not fold (a weight transposed first)."""
    from torchao.quantization.pt2e.constant_fold import constant_fold
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    from ..quantizer.block_scales import move_block_scales_onto_qnn_grid

    with _block_weights_folded_as_converted(prepared, codes):
        module = convert_pt2e(prepared, fold_quantize=False)
    move_block_scales_onto_qnn_grid(module)
    codes.fold(module)
    if codes.narrow:
        block_parameters_stored(module)
    if _constant_quantizes_left(module):
        constant_fold(module, _is_quantize)
    _drop_unused_tensors(module)
    return module


@contextlib.contextmanager
def _block_weights_folded_as_converted(module: torch.fx.GraphModule, codes: WeightCodes) -> Iterator[None]:
    """Within the block, each per-block weight observer of ``module`` (torchao's, converted by its
    own ``convert``) has its weight's codes made, and with ``codes.narrow`` its parameters stored,
    as soon as it is converted (``_folded_at_conversion``): PT2E's float32 scales and int32 zero
    points of a whole program (0.25 bytes a weight) are never held together."""
    patched = []
    for node in module.graph.nodes:
        if observes_a_weight(node):
            observer: Any = module.get_submodule(str(node.target))
            if hasattr(type(observer), "convert") and "convert" not in vars(observer):
                observer.convert = _folded_at_conversion(observer.convert, codes)
                patched.append(observer)
    try:
        yield
    finally:
        for observer in patched:
            del observer.convert


def _folded_at_conversion(convert: Callable[[torch.fx.GraphModule, torch.fx.Node], None], codes: WeightCodes) -> Any:
    """``convert`` of a weight observer followed at once by what ``convert_with_codes`` does to the whole
    program after ``convert_pt2e``, for this weight: its block scale moved onto QNN's grid, its
    codes folded, its dequantize's parameters stored."""
    from ..quantizer.block_scales import scale_moved_onto_qnn_grid

    def convert_and_fold(module: torch.fx.GraphModule, observer_node: torch.fx.Node) -> None:
        weight = observer_node.args[0]
        assert isinstance(weight, torch.fx.Node)  # observes_a_weight
        convert(module, observer_node)
        for quantize in [user for user in weight.users if _is_quantize(user)]:
            dequantizes = list(quantize.users)
            scale_moved_onto_qnn_grid(module, quantize)
            if codes.fold_node(module, quantize) and codes.narrow:
                for dequantize in dequantizes:
                    dequantize_parameters_stored(module, dequantize)

    return convert_and_fold


def _constant_quantizes_left(module: torch.fx.GraphModule) -> bool:
    """Whether a quantize node computes on constants only (``get_attr`` and what derives from them)."""
    return any(_is_quantize(node) for node in constant_nodes(module.graph))


def _is_quantize(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in _quantize_ops()


@functools.cache
def _quantize_ops() -> frozenset:
    """The ops ``convert_pt2e`` folds on weights (torchao's own list; ``quantize_affine`` is
    registered once torchao's primitives are imported)."""
    import torchao.quantization.quant_primitives  # noqa: F401  (registers torch.ops.torchao.*)

    return frozenset(
        (
            torch.ops.quantized_decomposed.quantize_per_tensor.default,
            torch.ops.quantized_decomposed.quantize_per_tensor.tensor,
            torch.ops.quantized_decomposed.quantize_per_channel.default,
            torch.ops.torchao.quantize_affine,
        )
    )


class WeightCodes:
    """The codes of each weight quantized so far, by the weight (its memory, or its name in
    ``offloaded``) and the quantization's arguments: a program quantizing a weight as an earlier one
    did gets the earlier codes. A weight ``offloaded`` holds is read when its codes are first made,
    then given back; what the programs still read of it after folding is put back in them. With
    ``narrow``, each weight's codes are stored in their own width as they are made
    (``codes_width.stored_codes``: 4-bit two a byte, 16-bit in 16 bits), the program reading them
    so, and only those are kept: an 8B model's codes as PT2E makes them (4-bit in int8, a 16-bit
    embedding in int32) are 9.6 GB, stored so 5.2."""

    def __init__(self, offloaded: Any = None, narrow: bool = False) -> None:
        self._known: dict[tuple, list[tuple[tuple, StoredCodes]]] = {}  # by fingerprints of the arguments
        self._offloaded = offloaded
        self.narrow = narrow

    def fold(self, module: torch.fx.GraphModule) -> None:
        """Replace each quantize of a weight (a ``get_attr``) by its codes."""
        for node in list(module.graph.nodes):
            self.fold_node(module, node)
        module.graph.eliminate_dead_code()  # the float weights' get_attr nodes, so they are dropped
        module.recompile()
        self._put_back(module)

    def fold_node(self, module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
        """Replace ``node`` by its codes where it quantizes a weight; whether it did."""
        from torchao.quantization.pt2e.constant_fold import replace_node_with_constant

        arguments = _constant_arguments(module, node) if _is_quantize(node) else None
        if arguments is None or not isinstance(arguments[0], torch.Tensor):
            return False
        weight, readers = node.args[0], list(node.users)
        assert isinstance(weight, torch.fx.Node)  # a get_attr: _constant_arguments read it
        stored = self._codes(node.target, arguments, str(weight.target), readers)
        replace_node_with_constant(module, node, stored.tensor)
        if not stored.as_computed:
            codes = readers[0].args[0]  # the get_attr that replaced the quantize
            assert isinstance(codes, torch.fx.Node) and codes.op == "get_attr"
            read_as_stored(module, codes, stored)
        return True

    def _is_offloaded(self, name: str) -> bool:
        return self._offloaded is not None and name in self._offloaded

    def _codes(self, op: Any, arguments: tuple, name: str, readers: list[torch.fx.Node]) -> StoredCodes:
        weight = arguments[0]
        if self._is_offloaded(name):
            key: tuple = (op, name)
        else:
            key = (op, weight.untyped_storage().data_ptr(), weight.storage_offset(), weight.shape, weight.stride())
        fingerprints = tuple(_fingerprint(argument) for argument in arguments[1:])
        for known, stored in self._known.get(key, []):
            if known == fingerprints:
                return stored
        stored = stored_in_rows(self._stored_rows(op, arguments, name, readers))
        self._known.setdefault(key, []).append((fingerprints, stored))
        return stored

    def _stored_rows(
        self, op: Any, arguments: tuple, name: str, readers: list[torch.fx.Node]
    ) -> Iterator[tuple[slice, int, StoredCodes]]:
        """The weight's codes a chunk of rows at a time, where its quantization treats rows apart
        (``_row_arguments``), else whole: its float32 copy and the quantize's intermediates are held
        a chunk at a time (an 8B model's embedding is 2.1 GB in float32, its quantize's
        intermediates as many again), each chunk stored as ``narrow`` asks."""
        weight = arguments[0]
        rows = weight.shape[0] if weight.dim() >= 2 else 1
        step = max(1, _CHUNK_ELEMENTS // max(1, weight[0].numel())) if weight.dim() >= 2 else rows
        if _row_arguments(op, arguments, slice(0, rows)) is None:
            step = rows
        for start in range(0, rows, step):
            chunk = slice(start, min(rows, start + step))
            whole = chunk.stop - chunk.start == rows
            if self._is_offloaded(name):
                values = self._offloaded.read(name, None if whole else chunk)
            else:
                values = weight if whole else weight[chunk]
            rest = tuple(arguments[1:]) if whole else _row_arguments(op, arguments, chunk)
            assert rest is not None  # rows are quantized apart, or the weight is one chunk
            codes = op(values, *rest)
            del values
            yield chunk, rows, stored_codes(codes, readers) if self.narrow else StoredCodes(codes, None, codes.shape)

    def _put_back(self, module: torch.fx.GraphModule) -> None:
        """The offloaded weights the program still reads as floats, read back into it."""
        for node in module.graph.nodes:
            if node.op == "get_attr" and self._is_offloaded(str(node.target)):
                owner, attr = module_attribute(module, str(node.target))
                getattr(owner, attr).data = self._offloaded.read(str(node.target))


#: The elements of a weight quantized at once (``WeightCodes._stored_rows``): 64 MB of float32.
_CHUNK_ELEMENTS = 1 << 24


def _row_arguments(op: Any, arguments: tuple, rows: slice) -> tuple | None:
    """A weight quantize's arguments after the weight for ``rows`` of it, where each row is
    quantized apart from the others (one scale for all, a scale per row, blocks within a row);
    None where it is not."""
    _, *rest = arguments
    ops = torch.ops.quantized_decomposed
    if op in (ops.quantize_per_tensor.default, ops.quantize_per_tensor.tensor):
        return tuple(rest)
    if op is ops.quantize_per_channel.default and rest[2] == 0:
        return (rest[0][rows], rest[1][rows], *rest[2:])
    block_size, scale, zero_point = (rest + [None, None, None])[:3]
    if op in (torch.ops.torchao.quantize_affine, torch.ops.torchao.quantize_affine.default) and block_size[0] == 1:
        return (block_size, scale[rows], None if zero_point is None else zero_point[rows], *rest[3:])
    return None


def _constant_arguments(module: torch.fx.GraphModule, node: torch.fx.Node) -> tuple | None:
    """The node's arguments with each ``get_attr`` read, or None if any is computed (or a
    keyword is given: PT2E passes quantize's arguments by position)."""
    if node.kwargs:
        return None
    values = []
    for argument in node.args:
        if isinstance(argument, torch.fx.Node):
            if argument.op != "get_attr":
                return None
            argument = getattr(*module_attribute(module, str(argument.target)))
        values.append(argument)
    return tuple(values)


def _fingerprint(argument: object) -> object:
    """A quantize's argument as ``WeightCodes`` remembers it: a tensor by its dtype, shape and
    bytes' digest, not the tensor -- kept, a per-block weight's scales and zero points were 0.25
    bytes a weight (1.75 GB for an 8B model) held until both programs were converted."""
    if isinstance(argument, torch.Tensor):
        return argument.dtype, tuple(argument.shape), TensorBackedData(argument.contiguous()).sha256()
    return argument


def module_attribute(module: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    """The module holding the dotted attribute ``name``, and its last part."""
    owner, _, attr = name.rpartition(".")
    return (module.get_submodule(owner) if owner else module), attr


def _graph_tensors(module: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    """The tensors the graph reads (``get_attr``), by name."""
    found = {}
    for node in module.graph.nodes:
        if node.op == "get_attr":
            value = getattr(*module_attribute(module, str(node.target)), None)
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
            delattr(*module_attribute(module, name))


def _share_equal_tensors(modules: Sequence[torch.fx.GraphModule]) -> None:
    """Give a later module an earlier one's tensor wherever they hold equal ones (the codes of one
    weight, quantized alike for prefill and decode): each weight's codes held once."""
    equal = EqualTensors()
    for module in modules:
        for name, tensor in _graph_tensors(module).items():
            kept = equal.one_of(tensor)
            if kept is not tensor:
                setattr(*module_attribute(module, name), kept)
