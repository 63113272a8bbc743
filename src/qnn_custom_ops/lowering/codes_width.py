"""A quantized host program's weight codes stored in their own width (issue 42, item 2).

PT2E's converted programs hold 16-bit codes in int32 and 4-bit codes in int8, and a per-block
weight's dequantize is torchao's ``dequantize_affine``, which ExecuTorch's portable kernels lack.
A host program that keeps its codes (``lower_methods(..., fold_weights=False)``: a model whose
float32 weights do not fit) is rewritten here, before it is exported, so that it stores:

- 16-bit codes as uint16 (or int16), its dequantize told so (the portable dequantize reads both);
- 4-bit codes two to a byte, low nibble first along the last axis, unpacked by the program
  itself before their dequantize: the low nibble as ``(byte << 4) >> 4`` and the high as
  ``byte >> 4``, arithmetic shifts on int8 that give each nibble's sign (portable kernels);
- a per-block dequantize as the ops it is: each block's codes, less its zero point in int32,
  as float32 times its scale (torchao's order of operations, so the same bits), the scales on
  QNN's grid stored as their uint8 multiples of one float32 unit a row;
- an embedding's gather on the table's codes, its rows dequantized after, not the whole table
  dequantized on every call;
- a linear layer's 8- and 16-bit codes stored transposed, so its float32 weight is not transposed
  again on every call (a tied table too, gathered by column);
- each weight dequantized just before its layer, not at the top of the graph, so the memory plan
  holds one weight in float32 at a time, not the model.

The program computes what it did before, bit for bit; only its constants are smaller. A weight
read by both methods is packed once, so the data file still stores it once.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import torch

from ..quantizer.block_scales import BLOCK_SCALE_STEPS

_DEQUANTIZE_PER_TENSOR = torch.ops.quantized_decomposed.dequantize_per_tensor.default
_DEQUANTIZE_PER_CHANNEL = torch.ops.quantized_decomposed.dequantize_per_channel.default
#: The narrowest storage of codes in [quant_min, quant_max] held in int32, by dtype.
_SIXTEEN_BITS = ((torch.uint16, 0, 65535), (torch.int16, -32768, 32767))


def _is_block_dequantize(node: torch.fx.Node) -> bool:
    """torchao's ``dequantize_affine`` (PT2E's convert calls the op's packet, not an overload)."""
    op = torch.ops.torchao.dequantize_affine
    return node.target is op or node.target is op.default


class CodesInTheirWidth:
    """Rewrites the converted programs of one export, each weight narrowed once for them all."""

    def __init__(self) -> None:
        self._narrowed: dict[tuple[int, str], torch.Tensor] = {}

    def __call__(self, module: torch.fx.GraphModule) -> torch.fx.GraphModule:
        """A copy of ``module`` (sharing its tensors) with its weights' codes narrowed."""
        rewritten = torch.fx.GraphModule(module, copy.deepcopy(module.graph))
        read_before = {str(node.target) for node in rewritten.graph.nodes if node.op == "get_attr"}
        for node in list(rewritten.graph.nodes):
            if node.op == "call_function" and node.target is torch.ops.aten.embedding.default:
                self._gather_codes(rewritten, node)
        for node in list(rewritten.graph.nodes):
            if node.op != "call_function":
                continue
            shape = _shape_of(rewritten, node.args[0]) if _is_block_dequantize(node) else None
            if shape is not None:
                self._pack(rewritten, node, *node.args[5:7])
                _write_out_block_dequantize(rewritten, node, shape)
            elif node.target in (_DEQUANTIZE_PER_TENSOR, _DEQUANTIZE_PER_CHANNEL):
                quant_min, quant_max, dtype = node.args[-3:]
                if dtype == torch.int8:
                    self._pack(rewritten, node, quant_min, quant_max)
                elif dtype == torch.int32:
                    self._narrow_sixteen(rewritten, node, quant_min, quant_max)
        rewritten.graph.eliminate_dead_code()
        for node in list(rewritten.graph.nodes):
            if node.op == "call_function" and node.target is torch.ops.aten.linear.default:
                self._on_transposed_codes(rewritten, node)
        rewritten.graph.eliminate_dead_code()
        _drop_unread_constants(rewritten, read_before)
        _dequantized_where_used(rewritten.graph)
        rewritten.recompile()
        return rewritten

    def _narrow_sixteen(self, module: torch.fx.GraphModule, dequantize: torch.fx.Node, low: int, high: int) -> None:
        """16-bit codes held in int32 -> uint16 (or int16), the dequantize told so."""
        codes = _constant(dequantize)
        narrow = _sixteen_bit_dtype(low, high)
        if codes is None or narrow is None:
            return
        weight = getattr(module, str(codes.target))
        setattr(module, str(codes.target), self._once(weight, str(narrow), lambda: weight.to(narrow)))
        dequantize.args = (*dequantize.args[:-1], narrow)

    def _pack(self, module: torch.fx.GraphModule, dequantize: torch.fx.Node, low: int, high: int) -> None:
        """4-bit codes held in int8 -> two a byte, unpacked by the program before ``dequantize``."""
        codes = _constant(dequantize)
        if codes is None:
            return
        weight = getattr(module, str(codes.target))
        if not _packs(weight, low, high):
            return
        name = f"{codes.target}_packed"
        setattr(module, name, self._once(weight, "int4", lambda: pack_int4(weight)))
        with module.graph.inserting_before(dequantize):
            packed = _get_attr(module.graph, name)
            dequantize.replace_input_with(codes, _unpack_int4_nodes(module.graph, packed, tuple(weight.shape)))

    def _gather_codes(self, module: torch.fx.GraphModule, embedding: torch.fx.Node) -> None:
        """``embedding(dequantize(table), ids)`` -> ``dequantize(embedding(table, ids))``: the
        rows' codes gathered, then only they dequantized (the same values: a gather moves them),
        where the program dequantized the whole table on every call (a float32 copy of it in its
        memory). A gather's other arguments (``padding_idx``: which row gets no gradient) change
        nothing forward. A table quantized per row (a tied embedding at its ``lm_head``'s encoding) has
        each row's scale and zero point gathered with it; stored transposed as it was converted
        (tied: ``_read_transposed``), its columns. A 16-bit table is stored in 16 bits, as other
        codes are."""
        dequantize = embedding.args[0]
        if not (
            isinstance(dequantize, torch.fx.Node)
            and dequantize.target in (_DEQUANTIZE_PER_TENSOR, _DEQUANTIZE_PER_CHANNEL)
            and not embedding.kwargs
            and "val" in embedding.meta
        ):
            return
        arguments: Any = dequantize.args  # a per-tensor or per-channel dequantize's, checked above
        codes, *encoding = arguments
        transposed = _stored_transposed(codes) if dequantize.target is _DEQUANTIZE_PER_CHANNEL else None
        if _constant(dequantize) is None and transposed is None:
            return
        low, high, dtype = encoding[-3:]
        narrow = _sixteen_bit_dtype(low, high) if dtype == torch.int32 and transposed is None else None
        if narrow is not None:
            table = getattr(module, str(codes.target))
            setattr(module, str(codes.target), self._once(table, str(narrow), lambda: table.to(narrow)))
            encoding[-1] = narrow
        with module.graph.inserting_before(embedding):
            if dequantize.target is _DEQUANTIZE_PER_TENSOR:
                rows = module.graph.call_function(torch.ops.aten.embedding.default, (codes, embedding.args[1]))
                reals = module.graph.call_function(_DEQUANTIZE_PER_TENSOR, (rows, *encoding))
            else:
                reals = _gather_rows_per_channel(
                    module.graph, codes, embedding.args[1], encoding, list(embedding.meta["val"].shape)
                )
        embedding.replace_all_uses_with(reals)
        module.graph.erase_node(embedding)

    def _on_transposed_codes(self, module: torch.fx.GraphModule, linear: torch.fx.Node) -> None:
        """``linear(x, dequantize(codes), bias)`` -> ``matmul(x, dequantize(codes^T))`` (+ bias),
        the codes stored transposed (the same bytes): ``linear`` lowers to a copy of its float32
        weight transposed and an ``mm``, a second float32 copy of each weight on every call (the
        ``lm_head``'s 1 GB at Llama-3.2-1B's size) in the memory plan. A table the embedding also
        gathers rows from (tied) is then gathered along its columns. Left as it is where anything
        else reads the codes, or where they are computed (unpacked 4-bit codes)."""
        weight = linear.args[1]
        if not (isinstance(weight, torch.fx.Node) and len(weight.users) == 1 and _reads_rows(weight)):
            return
        stored = _stored_transposed(weight.args[0])
        gathers: list[torch.fx.Node] = []
        if stored is not None:  # transposed as it was converted (``stored_codes``)
            name = str(stored.target)
        else:
            codes = _constant(weight)
            table = getattr(module, str(codes.target)) if codes is not None else None
            if codes is None or table is None or table.dim() != 2:
                return
            same = [n for n in module.graph.nodes if n.op == "get_attr" and n.target == codes.target]
            readers = [u for n in same for u in n.users]
            gathers = [u for u in readers if u is not weight]
            if not all(u.target is torch.ops.aten.index_select.default and u.args[1] == 0 for u in gathers):
                return
            name = f"{codes.target}_transposed"
            setattr(module, name, self._once(table, "transposed", lambda: table.t().contiguous()))
        aten, graph, dequantize = torch.ops.aten, module.graph, _DEQUANTIZE_PER_TENSOR
        with graph.inserting_before(linear):
            arguments = [_get_attr(graph, name), *weight.args[1:]]
            if weight.target is _DEQUANTIZE_PER_CHANNEL:
                dequantize, arguments[3] = _DEQUANTIZE_PER_CHANNEL, 1
            product = graph.call_function(
                aten.matmul.default, (linear.args[0], graph.call_function(dequantize, tuple(arguments)))
            )
            if len(linear.args) > 2 and linear.args[2] is not None:
                product = graph.call_function(aten.add.Tensor, (product, linear.args[2]))
        linear.replace_all_uses_with(product)
        graph.erase_node(linear)
        for gather in gathers:
            with graph.inserting_before(gather):
                columns = graph.call_function(aten.index_select.default, (_get_attr(graph, name), 1, gather.args[2]))
                rows = graph.call_function(aten.permute.default, (columns, [1, 0]))
            gather.replace_all_uses_with(rows)
            graph.erase_node(gather)

    def _once(self, weight: torch.Tensor, kind: str, narrow: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``narrow()`` of ``weight``, computed once for every program of the export."""
        key = (weight.untyped_storage().data_ptr(), kind)
        if key not in self._narrowed:
            self._narrowed[key] = narrow()
        return self._narrowed[key]


class StoredCodes(NamedTuple):
    """A weight's codes as a program stores them: narrowed (``form``: "int4" two a byte, or a
    16-bit dtype's name) or in the width computed (None), the shape of the codes themselves, and
    whether they are stored transposed (a linear layer's: ``_on_transposed_codes``)."""

    tensor: torch.Tensor
    form: str | None
    shape: tuple[int, ...]
    transposed: bool = False

    @property
    def as_computed(self) -> bool:
        """Whether they are stored as PT2E computed them, so the program reads them as they are."""
        return self.form is None and not self.transposed


def stored_codes(codes: torch.Tensor, dequantizes: Sequence[torch.fx.Node]) -> StoredCodes:
    """``codes`` (a weight's, as PT2E computes them) stored as the program of codes that
    ``CodesInTheirWidth`` makes stores them, where every one of ``dequantizes`` (what reads them)
    can read them so: 4-bit codes two a byte, unless a gather reads them (it gathers codes;
    ``_gather_codes``), 16-bit codes in 16 bits, a linear layer's 8- and 16-bit codes transposed.
    Made as each weight is folded (``llm.conversion.WeightCodes``), so that neither a program's codes
    as computed nor a second copy of them is ever held."""
    shape = tuple(codes.shape)
    ranges = [_codes_range(d) for d in dequantizes]
    if not dequantizes or any(r is None for r in ranges):
        return StoredCodes(codes, None, shape)
    lows, highs = zip(*[r for r in ranges if r is not None])
    gathered = any(u.target is torch.ops.aten.embedding.default for d in dequantizes for u in d.users)
    if not gathered and _packs(codes, min(lows), max(highs)):
        return StoredCodes(pack_int4(codes), INT4, shape)
    narrow = _sixteen_bit_dtype(min(lows), max(highs))
    form = None
    if codes.dtype == torch.int32 and narrow is not None and not any(map(_is_block_dequantize, dequantizes)):
        codes, form = codes.to(narrow), str(narrow).removeprefix("torch.")
    if codes.dim() == 2 and _read_transposed(dequantizes):
        return StoredCodes(codes.t().contiguous(), form, shape, transposed=True)
    return StoredCodes(codes, form, shape)


def _read_transposed(dequantizes: Sequence[torch.fx.Node]) -> bool:
    """Whether codes read by ``dequantizes`` are stored transposed: a linear layer's, read by its
    ``matmul`` as they are, and a tied table's besides, whose gathers then pick columns
    (``_gather_codes``). Stored so as it is converted, a tied table is held once; transposed when
    lowered, it was held twice (a 3B model's: 0.37 GiB of int8 codes again)."""
    return any(map(_read_by_a_linear, dequantizes)) and all(
        _read_by_a_linear(d) or _gathered_per_row(d) for d in dequantizes
    )


def _gathered_per_row(dequantize: torch.fx.Node) -> bool:
    """Whether ``dequantize`` reads a table quantized per row for gathers alone (a tied table's)."""
    embedding = torch.ops.aten.embedding.default
    return (
        dequantize.target is _DEQUANTIZE_PER_CHANNEL
        and _reads_rows(dequantize)
        and bool(dequantize.users)
        and all(u.target is embedding and u.args[0] is dequantize for u in dequantize.users)
    )


def block_parameters_stored(module: torch.fx.GraphModule) -> None:
    """Each per-block dequantize's parameters as the program of codes stores them, made as the
    program is converted: zero points left out where all zero, scales on QNN's grid as their uint8
    steps and a float32 unit a row (``_grid_scales``), the program multiplying them back. PT2E's
    float32 scales and int32 zero points, a pair per block of 32 weights, are 0.25 bytes a weight a
    program (1.75 GB for an 8B model): they were held beside the codes until lowering."""
    graph = module.graph
    read_before = {str(node.target) for node in graph.nodes if node.op == "get_attr"}
    for node in list(graph.nodes):
        dequantize_parameters_stored(module, node)
    graph.eliminate_dead_code()
    _drop_unread_constants(module, read_before)
    module.recompile()


def dequantize_parameters_stored(module: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    """``block_parameters_stored`` of one node, where it is a per-block dequantize; the float32
    scales and zero points it no longer reads are let go at once, a weight's at a time."""
    if not _is_block_dequantize(node):
        return
    graph = module.graph
    scale, zero_point = node.args[2], node.args[3]
    if isinstance(zero_point, torch.fx.Node) and _all_zero(module, zero_point):
        node.args = (*node.args[:3], None, *node.args[4:])
    if isinstance(scale, torch.fx.Node) and scale.op == "get_attr":
        shape = list(getattr(module, str(scale.target)).shape)
        with graph.inserting_before(node):
            steps = _grid_scales(module, scale, [shape[0], -1, 1])
            if steps is not None:
                scales = graph.call_function(torch.ops.aten.reshape.default, (steps, shape))
                scales.meta[_GRID_SCALES] = True
                node.replace_input_with(scale, scales)
    for parameter in (scale, zero_point):
        if isinstance(parameter, torch.fx.Node) and parameter.op == "get_attr" and not parameter.users:
            _forget_constant(module, parameter)


def _forget_constant(module: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    """A ``get_attr`` nothing reads, erased, and its tensor let go."""
    module.graph.erase_node(node)
    _delete_own_constant(module, str(node.target))


def stored_in_rows(chunks: Iterable[tuple[slice, int, StoredCodes]]) -> StoredCodes:
    """A weight's codes stored a chunk of its rows at a time (``stored_codes`` of each: ``chunks``
    gives each one's rows, the weight's rows, and the chunk), placed in one tensor as they come, so
    only one chunk is held beside it."""
    whole: StoredCodes | None = None
    for rows, total, chunk in chunks:
        if whole is None and rows.stop - rows.start == total:
            return chunk
        stored = chunk.tensor
        if whole is None:
            shape = (stored.shape[0], total) if chunk.transposed else (total, *stored.shape[1:])
            whole = chunk._replace(tensor=torch.empty(shape, dtype=stored.dtype), shape=(total, *chunk.shape[1:]))
        if chunk.transposed:
            whole.tensor[:, rows] = stored
        else:
            whole.tensor[rows] = stored
    assert whole is not None, "a weight of no rows"
    return whole


def read_as_stored(module: torch.fx.GraphModule, codes: torch.fx.Node, stored: StoredCodes) -> None:
    """The readers of ``codes`` (a ``get_attr`` of ``stored.tensor``) given what they read before it
    was stored so: packed codes unpacked by the program, transposed codes transposed back (a view;
    ``_on_transposed_codes`` then multiplies by them as they are), 16-bit codes read as such by
    their dequantizes (the portable dequantize reads uint16 and int16)."""
    readers = list(codes.users)
    read: torch.fx.Node = codes
    with module.graph.inserting_before(codes.next):  # in order, after the codes
        if stored.form == INT4:
            read = _unpack_int4_nodes(module.graph, codes, stored.shape)
        elif stored.transposed:
            read = module.graph.call_function(torch.ops.aten.permute.default, (codes, [1, 0]))
    for reader in readers:
        reader.replace_input_with(codes, read)
        if stored.form not in (None, INT4):
            reader.args = (*reader.args[:-1], getattr(torch, stored.form))


def _reads_rows(dequantize: torch.fx.Node) -> bool:
    """A per-tensor dequantize, or a per-channel one of a scale per row (axis 0)."""
    return dequantize.target is _DEQUANTIZE_PER_TENSOR or (
        dequantize.target is _DEQUANTIZE_PER_CHANNEL and bool(dequantize.args[3] == 0)
    )


def _read_by_a_linear(dequantize: torch.fx.Node) -> bool:
    """Whether ``dequantize`` gives its values to one linear layer as its weight, and nothing else."""
    (user, *others) = dequantize.users or [None]
    return (
        _reads_rows(dequantize)
        and not others
        and user is not None
        and user.target is torch.ops.aten.linear.default
        and user.args[1] is dequantize
    )


def _stored_transposed(codes: Any) -> torch.fx.Node | None:
    """The ``get_attr`` of codes stored transposed, where ``codes`` reads them back (``read_as_stored``)."""
    if isinstance(codes, torch.fx.Node) and codes.target is torch.ops.aten.permute.default:
        stored = codes.args[0]
        if isinstance(stored, torch.fx.Node) and stored.op == "get_attr" and codes.args[1] == [1, 0]:
            return stored
    return None


#: ``StoredCodes.form`` of 4-bit codes two a byte.
INT4 = "int4"


def _codes_range(dequantize: torch.fx.Node) -> tuple[int, int] | None:
    """The [quant_min, quant_max] of the codes a dequantize reads, None for another node."""
    if _is_block_dequantize(dequantize):
        return dequantize.args[5], dequantize.args[6]  # type: ignore[return-value]  # torchao's positions
    if dequantize.target in (_DEQUANTIZE_PER_TENSOR, _DEQUANTIZE_PER_CHANNEL):
        return dequantize.args[-3], dequantize.args[-2]  # type: ignore[return-value]
    return None


def _packs(codes: torch.Tensor, low: int, high: int) -> bool:
    """Whether codes in [low, high] held in int8 go two a byte (an even last axis)."""
    return -8 <= low and high <= 7 and codes.dtype == torch.int8 and codes.shape[-1] % 2 == 0


def _sixteen_bit_dtype(low: int, high: int) -> torch.dtype | None:
    """The 16-bit dtype that holds codes in [low, high], None where none does."""
    return next((dtype for dtype, lo, hi in _SIXTEEN_BITS if lo <= low and high <= hi), None)


def _shape_of(module: torch.fx.GraphModule, codes: torch.fx.Node) -> tuple[int, ...] | None:
    """The shape of codes a dequantize reads: a constant's, or its unpacking's (``_unpack_int4_nodes``);
    None for codes computed otherwise."""
    if codes.op == "get_attr":
        return tuple(getattr(module, str(codes.target)).shape)
    return codes.meta.get("codes_shape")


def _gather_rows_per_channel(
    graph: torch.fx.Graph, codes: torch.fx.Node, ids: Any, encoding: list, shape: list[int]
) -> torch.fx.Node:
    """The rows ``ids`` picks of a table quantized per row, dequantized with their own rows'
    scales and zero points: the ids flattened so the rows are axis 0 of a matrix, as the
    per-channel dequantize reads them, and the result given the gather's ``shape``. A table
    stored transposed (``codes`` reads it back: ``read_as_stored``) has its columns picked, and
    only they transposed back."""
    scales, zero_points, axis, low, high, dtype = encoding
    aten = torch.ops.aten
    flat = graph.call_function(aten.reshape.default, (ids, [-1]))
    stored = _stored_transposed(codes)
    if stored is not None:
        columns = graph.call_function(aten.index_select.default, (stored, 1, flat))
        rows = graph.call_function(aten.permute.default, (columns, [1, 0]))
    else:
        rows = graph.call_function(aten.index_select.default, (codes, 0, flat))
    row_scales = graph.call_function(aten.index_select.default, (scales, 0, flat))
    row_points = graph.call_function(aten.index_select.default, (zero_points, 0, flat))
    reals = graph.call_function(_DEQUANTIZE_PER_CHANNEL, (rows, row_scales, row_points, axis, low, high, dtype))
    return graph.call_function(aten.reshape.default, (reals, shape))


def constant_nodes(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The nodes that compute on constants alone: ``get_attr`` and what derives from them only."""
    constant: set[torch.fx.Node] = set()
    for node in graph.nodes:
        inputs = node.all_input_nodes
        if node.op == "get_attr" or (node.op == "call_function" and inputs and all(i in constant for i in inputs)):
            constant.add(node)
    return constant


def _dequantized_where_used(graph: torch.fx.Graph) -> None:
    """Each computation on constants alone (a weight's unpacking and dequantize) moved to just
    before its first user. PT2E's convert puts them at the top of the graph, so every weight's
    float32 copy was live from the start of a call to its layer: ExecuTorch's memory plan then
    held the whole model in float32 (a 1B program of codes planned 4.6 GiB a method)."""
    constant = constant_nodes(graph)
    order: dict[torch.fx.Node, float] = {node: index for index, node in enumerate(graph.nodes)}
    for node in reversed([n for n in graph.nodes if n.op == "call_function" and n in constant]):
        first = min(node.users, key=order.__getitem__, default=None)
        if first is not None and first.op != "output":
            first.prepend(node)
            order[node] = (order[node.prev] + order[first]) / 2  # its place now: between its neighbours


def _drop_unread_constants(module: torch.fx.GraphModule, read_before: set[str]) -> None:
    """Remove from the copy the constants its graph no longer reads (codes now packed, scales now
    laid out): export would lift a registered buffer read by nothing, and store it."""
    read = {str(node.target) for node in module.graph.nodes if node.op == "get_attr"}
    for name in read_before - read:
        _delete_own_constant(module, name)


def _delete_own_constant(module: torch.fx.GraphModule, name: str) -> None:
    """``module.<name>`` deleted where the module holds it itself (not a submodule's)."""
    if "." not in name and hasattr(module, name):
        delattr(module, name)


def _constant(dequantize: torch.fx.Node) -> torch.fx.Node | None:
    """The ``get_attr`` a dequantize reads its codes from, None for codes computed."""
    codes = dequantize.args[0]
    return codes if isinstance(codes, torch.fx.Node) and codes.op == "get_attr" else None


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """int8 codes in [-8, 7] -> int8 bytes of two codes each (low nibble: the even index)."""
    pairs = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    return ((pairs[..., 0] & 0x0F) | (pairs[..., 1] << 4)).to(torch.int8)


def unpack_int4(packed: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``pack_int4``'s inverse, in the ops the program runs."""
    low = torch.bitwise_right_shift(torch.bitwise_left_shift(packed, 4), 4)
    high = torch.bitwise_right_shift(packed, 4)
    return torch.stack([low, high], dim=-1).reshape(shape)


def _unpack_int4_nodes(graph: torch.fx.Graph, packed: torch.fx.Node, shape: tuple[int, ...]) -> torch.fx.Node:
    """``unpack_int4`` of ``packed`` as graph nodes."""
    aten = torch.ops.aten
    shifted = graph.call_function(aten.bitwise_left_shift.Tensor_Scalar, (packed, 4))
    low = graph.call_function(aten.bitwise_right_shift.Tensor_Scalar, (shifted, 4))
    high = graph.call_function(aten.bitwise_right_shift.Tensor_Scalar, (packed, 4))
    pairs = graph.call_function(aten.stack.default, ([low, high], -1))
    unpacked = graph.call_function(aten.reshape.default, (pairs, list(shape)))
    unpacked.meta["codes_shape"] = shape
    return unpacked


def _write_out_block_dequantize(module: torch.fx.GraphModule, node: torch.fx.Node, shape: tuple[int, ...]) -> None:
    """torchao's ``dequantize_affine`` of a ``shape`` weight over blocks of one row's inputs, as
    its ops: per block, (codes - zero point) in int32, as float32, times the scale; a symmetric
    weight's zero points (all 0) are left out, not stored. Constants are laid out here (a view of
    a program constant in the program trips ExecuTorch's emitter)."""
    arguments: Any = node.args  # torchao's dequantize_affine's
    codes, block_size, scale, zero_point = arguments[:4]
    rows, columns = shape
    blocks = columns // block_size[1]
    aten, graph = torch.ops.aten, module.graph
    with graph.inserting_before(node):
        centred = _laid_out(module, codes, [rows, blocks, block_size[1]], torch.int32)
        if not _all_zero(module, zero_point):
            points = _laid_out(module, zero_point, [rows, blocks, 1], torch.int32)
            centred = graph.call_function(aten.sub.Tensor, (centred, points))
        reals = graph.call_function(aten._to_copy.default, (centred,), {"dtype": torch.float32})
        scales = (
            _grid_scales_made(scale)
            or _grid_scales(module, scale, [rows, blocks, 1])
            or _laid_out(module, scale, [rows, blocks, 1], torch.float32)
        )
        product = graph.call_function(aten.mul.Tensor, (reals, scales))
        weight = graph.call_function(aten.reshape.default, (product, [rows, columns]))
    node.replace_all_uses_with(weight)
    graph.erase_node(node)


def _grid_scales(module: torch.fx.GraphModule, scale: torch.fx.Node, shape: list[int]) -> torch.fx.Node | None:
    """Block scales on QNN's grid (``quantizer.block_scales``: each a multiple, 1 to 16, of its
    row's unit) stored as the multiples in uint8 and one float32 unit a row, and multiplied back
    in the program: the same float32 products, a quarter of the bytes. None for scales off it."""
    if scale.op != "get_attr":
        return None
    scales = getattr(module, str(scale.target)).reshape(shape)
    unit = scales.amax(dim=(1, 2), keepdim=True) / BLOCK_SCALE_STEPS
    steps = torch.round(scales / unit).clamp(1, BLOCK_SCALE_STEPS)
    if not torch.equal(steps * unit, scales):
        return None
    graph, name = module.graph, str(scale.target)
    steps_name, unit_name = _free_name(module, f"{name}_steps"), _free_name(module, f"{name}_unit")
    setattr(module, steps_name, steps.to(torch.uint8))
    setattr(module, unit_name, unit)
    reals = graph.call_function(
        torch.ops.aten._to_copy.default, (_get_attr(graph, steps_name),), {"dtype": torch.float32}
    )
    return graph.call_function(torch.ops.aten.mul.Tensor, (reals, _get_attr(graph, unit_name)))


def _free_name(module: torch.nn.Module, base: str) -> str:
    """``base``, or ``base_<n>`` where ``module`` holds that name already: a scale's name is taken
    again once the scale is let go (``dequantize_parameters_stored``), its steps' must not be."""
    name, index = base, 0
    while hasattr(module, name):
        index += 1
        name = f"{base}_{index}"
    return name


#: The mark ``block_parameters_stored`` leaves on the scales it computes from grid steps.
_GRID_SCALES = "qco_grid_scales"


def _grid_scales_made(scale: torch.fx.Node) -> torch.fx.Node | None:
    """The ``[rows, blocks, 1]`` product of steps and units that ``block_parameters_stored`` made at
    conversion, under its reshape: read as it is, not reshaped and copied back on every call."""
    made = scale.args[0] if scale.meta.get(_GRID_SCALES) else None
    return made if isinstance(made, torch.fx.Node) else None


def _all_zero(module: torch.fx.GraphModule, value: torch.fx.Node | None) -> bool:
    """Whether ``value`` is absent or a constant of zeros."""
    if value is None:
        return True
    return value.op == "get_attr" and not bool(getattr(module, str(value.target)).any())


def _laid_out(
    module: torch.fx.GraphModule, value: torch.fx.Node, shape: list[int], dtype: torch.dtype
) -> torch.fx.Node:
    """``value`` reshaped to ``shape`` as ``dtype``: a new constant when ``value`` is one, else ops."""
    graph = module.graph
    if value.op == "get_attr":
        name = f"{value.target}_as_{'x'.join(map(str, shape))}"
        setattr(module, name, getattr(module, str(value.target)).reshape(shape).to(dtype))
        return _get_attr(graph, name)
    reshaped = graph.call_function(torch.ops.aten.reshape.default, (value, shape))
    return graph.call_function(torch.ops.aten._to_copy.default, (reshaped,), {"dtype": dtype})


def _get_attr(graph: torch.fx.Graph, name: str) -> torch.fx.Node:
    """A ``get_attr`` of a plain tensor attribute, as PT2E's converted programs hold their codes
    (fx warns that it is no parameter or buffer; export lifts it as a constant, as it should)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return graph.get_attr(name)
