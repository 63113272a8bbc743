"""PT2E quantization of the prefill and decode programs of ``export_llm`` (``quantize_llm``):
calibration driven as ExecuTorch's device runner drives the programs, each weight quantized once
for both methods and stored as codes, the caches' encodings shared, 8-bit KV caches, the parts
kept at 8 bits."""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import itertools
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
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
from ..progress import Progress, silent, time_left
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


def convert_calibrated(
    prepared: Sequence[torch.fx.GraphModule],
    shape: LlmShape,
    kv_bits: int = 16,
    offloaded: Any = None,
    narrow: bool = False,
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """The calibrated prefill and decode programs converted (``_convert``), their caches' encodings
    shared first (``share_cache_encodings``), each weight's codes made once and held once; the
    weights ``offloaded`` holds (``checkpoint_reading.OffloadedWeights``) read from it as needed.
    ``narrow``: the codes stored in their own width as they are made (``_WeightCodes``), for a host
    program that keeps its codes (``lower_methods(..., fold_weights=False)``); QNN's lowering and
    the folding of weights read codes as PT2E makes them."""
    if shape.cache == "runner":
        share_cache_encodings(prepared, shape, kv_bits)
    codes = _WeightCodes(offloaded, narrow)
    _ranges_let_go_once_read(prepared)
    converted = (_convert(prepared[0], codes), _convert(prepared[1], codes))
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
                if _observes_a_weight(node) and hasattr(observer, "min_val") and hasattr(observer, "max_val"):
                    weight_observers[id(observer)] = observer
    groups: dict[tuple, list[Any]] = {}
    for observer in weight_observers.values():
        key = (id(observer.min_val), id(observer.max_val), _configuration(observer))
        groups.setdefault(key, []).append(observer)
    for observers in groups.values():
        _RangesReadOnce(observers, sum(uses[id(o)] for o in observers))


def _observes_a_weight(node: torch.fx.Node) -> bool:
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
    """Empty torchao's cache of each module's device (``torchao.utils._assert_and_get_unique_device``,
    a ``functools.cache`` that prepare and convert call with the module): it kept every prepared
    program alive after conversion, and with it each weight observer's ranges (at 16a4w_block, a
    minimum and a maximum per block of 32 weights, per program: 0.5 bytes a weight, 3.5 GB for an
    8B model) through lowering."""
    from torchao import utils

    utils._assert_and_get_unique_device.cache_clear()


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


def _convert(prepared: torch.fx.GraphModule, codes: _WeightCodes) -> torch.fx.GraphModule:
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
def _block_weights_folded_as_converted(module: torch.fx.GraphModule, codes: _WeightCodes) -> Iterator[None]:
    """Within the block, each per-block weight observer of ``module`` (torchao's, converted by its
    own ``convert``) has its weight's codes made, and with ``codes.narrow`` its parameters stored,
    as soon as it is converted (``_folded_at_conversion``): PT2E's float32 scales and int32 zero
    points of a whole program (0.25 bytes a weight) are never held together."""
    patched = []
    for node in module.graph.nodes:
        if _observes_a_weight(node):
            observer: Any = module.get_submodule(str(node.target))
            if hasattr(type(observer), "convert") and "convert" not in vars(observer):
                observer.convert = _folded_at_conversion(observer.convert, codes)
                patched.append(observer)
    try:
        yield
    finally:
        for observer in patched:
            del observer.convert


def _folded_at_conversion(convert: Callable[[torch.fx.GraphModule, torch.fx.Node], None], codes: _WeightCodes) -> Any:
    """``convert`` of a weight observer followed at once by what ``_convert`` does to the whole
    program after ``convert_pt2e``, for this weight: its block scale moved onto QNN's grid, its
    codes folded, its dequantize's parameters stored."""
    from ..quantizer.block_scales import scale_moved_onto_qnn_grid

    def convert_and_fold(module: torch.fx.GraphModule, observer_node: torch.fx.Node) -> None:
        weight = observer_node.args[0]
        assert isinstance(weight, torch.fx.Node)  # _observes_a_weight
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


class _WeightCodes:
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
                owner, attr = _attribute(module, str(node.target))
                getattr(owner, attr).data = self._offloaded.read(str(node.target))


#: The elements of a weight quantized at once (``_WeightCodes._stored_rows``): 64 MB of float32.
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
            argument = getattr(*_attribute(module, str(argument.target)))
        values.append(argument)
    return tuple(values)


def _fingerprint(argument: object) -> object:
    """A quantize's argument as ``_WeightCodes`` remembers it: a tensor by its dtype, shape and
    bytes' digest, not the tensor -- kept, a per-block weight's scales and zero points were 0.25
    bytes a weight (1.75 GB for an 8B model) held until both programs were converted."""
    if isinstance(argument, torch.Tensor):
        return argument.dtype, tuple(argument.shape), TensorBackedData(argument.contiguous()).sha256()
    return argument


@contextlib.contextmanager
def _weights_observed_once(modules: Sequence[torch.fx.GraphModule]) -> Iterator[None]:
    """Each observer of a constant (a weight) observes it now, and passes values on unobserved
    within the block: a weight is the same on every calibration call, and its min and max,
    taken again per call, were a quarter of calibration's time."""
    observed = []
    for module in modules:
        for node in module.graph.nodes:
            if _observes_a_weight(node):
                source = node.args[0]
                observer = module.get_submodule(str(node.target))
                observer(getattr(*_attribute(module, str(source.target))))
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
    return _convert(prepared, _WeightCodes())


@dataclass
class _CountedStep:
    """A step that counts its calls (calibration says how many each program observed)."""

    step: Step
    calls: int = 0

    def __call__(self, inputs: tuple) -> Sequence[torch.Tensor]:
        self.calls += 1
        return self.step(inputs)


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
