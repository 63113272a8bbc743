"""Quantized variants of bound ops: the call the HTP makes, as a torch op the host can run.

On the phone QNN folds every dequantize -> op -> quantize into tensor encodings: the op's
kernel receives the quantized tensors with their scale and offset. ``quantized_variant``
defines, once per bound op, ``qco_quantized::<ns>__<name>`` (functional, ``.out`` and fake):
three lists -- for every input in OpDef order, then every output, the kernel dtype, the
scale and the QNN offset -- followed by the op's own arguments, with quantized tensors where
the original takes float ones. The host kernel library registers it; ``encoding_of`` reads
an encoding off a PT2E dequantize/quantize node the way executorch's QNN lowering does
(offset = -zero_point), so the host and the QNN op wrapper agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ReportedError
from ..opdef import Datatype
from ..opdef.datatypes import DATATYPES, kernel_rows, plain_datatype
from .alignment import ArgKind, OpBinding, target_op_name
from .define import out_arguments, out_fake_of, out_kernel_of, returns_schema, schema_argument_text
from .op_name import OperatorName

NAMESPACE = "qco_quantized"

_LIBRARY: list[torch.library.Library] = []


class QuantizedEmulationError(ReportedError, ValueError):
    """A bound op whose quantized call the host cannot make as the HTP does."""


@dataclass(frozen=True)
class Encoding:
    """How one tensor reaches the kernel: QNN datatype, real = scale * (q + offset)."""

    datatype: Datatype
    scale: float = 1.0
    offset: int = 0

    @property
    def kernel_dtype(self) -> int:
        return DATATYPES[self.datatype].abi_value

    @property
    def is_quantized(self) -> bool:
        return self.datatype.is_fixed_point

    def __str__(self) -> str:
        if not self.is_quantized:
            return self.datatype.short_name
        return f"{self.datatype.short_name} scale {self.scale:.6g} offset {self.offset}"


@dataclass(frozen=True)
class EncodingArgument:
    """One of the lists that lead a quantized variant's arguments, one entry per input of the op
    in OpDef order, then per output: the contract between the variant's schema, the node that
    calls it and the host library's kernel that unboxes it."""

    name: str
    kind: ArgKind  # INT_LIST or FLOAT_LIST
    of: Callable[[Encoding], int | float]

    @property
    def schema(self) -> str:
        return f"{self.kind.value} {self.name}"


ENCODING_ARGUMENTS = (
    EncodingArgument("qco_dtypes", ArgKind.INT_LIST, lambda e: e.kernel_dtype),
    EncodingArgument("qco_scales", ArgKind.FLOAT_LIST, lambda e: e.scale),
    EncodingArgument("qco_offsets", ArgKind.INT_LIST, lambda e: e.offset),
)
_ENCODING_SCHEMA = ", ".join(argument.schema for argument in ENCODING_ARGUMENTS)


def encoding_lists(encodings: Sequence[Encoding]) -> tuple[list[int | float], ...]:
    """The leading arguments of a quantized variant's call for these encodings."""
    return tuple([argument.of(e) for e in encodings] for argument in ENCODING_ARGUMENTS)


def is_dequantize(node: Any) -> bool:
    return isinstance(node, torch.fx.Node) and "quantized_decomposed.dequantize" in _target_name(node)


def is_quantize(node: Any) -> bool:
    return isinstance(node, torch.fx.Node) and "quantized_decomposed.quantize" in _target_name(node)


def _target_name(node: torch.fx.Node) -> str:
    """``quantized_decomposed.dequantize_per_tensor.default`` for torch and edge targets alike."""
    return target_op_name(node.target) or str(node.target)


def quantized_datatype(node: torch.fx.Node) -> Datatype:
    """The fixed-point datatype of a PT2E (de)quantize node, per tensor or per channel."""
    first = 3 if "per_tensor" in _target_name(node) else 4  # per channel: (x, scales, zero_points, axis, ...)
    low, high = node.args[first], node.args[first + 1]
    assert isinstance(low, int) and isinstance(high, int), f"{node.name}: quant_min/quant_max are not ints"
    return Datatype.fixed_point(low, high)


def encoding_of(node: torch.fx.Node) -> Encoding:
    """The encoding of a PT2E (de)quantize node ``(x, scale, zero_point, min, max, dtype)``."""
    if "per_tensor" not in _target_name(node):
        raise QuantizedEmulationError(
            f"node {node.name} ({_target_name(node)}) is not per-tensor: a kernel "
            "takes one scale and offset per tensor (quantize it per tensor)"
        )
    scale, zero_point, low, high = (node.args[i] for i in range(1, 5))
    if not isinstance(scale, (int, float)) or not isinstance(zero_point, (int, float)):
        raise QuantizedEmulationError(
            f"node {node.name}: its scale or zero point is computed in the graph, "
            "not a constant (convert the model with convert_pt2e)"
        )
    assert isinstance(low, int) and isinstance(high, int), f"{node.name}: quant_min/quant_max are not ints"
    return Encoding(Datatype.fixed_point(low, high), float(scale), -int(zero_point))


def plain_encoding(dtype: torch.dtype) -> Encoding:
    """The encoding of an unquantized tensor (float, integer or bool)."""
    datatype = plain_datatype(dtype)
    if datatype is None:
        raise QuantizedEmulationError(f"a {dtype} tensor has no QNN datatype")
    return Encoding(datatype)


def quantized_name(binding: OpBinding) -> str:
    name = OperatorName.of(binding.overload)
    overload = "" if name.overload == "default" else f"_{name.overload}"
    return f"{name.namespace}__{name.name}{overload}"


def quantized_variant(binding: OpBinding) -> torch._ops.OpOverload:
    """``qco_quantized::<ns>__<name>`` for ``binding``, defined on first use."""
    name = quantized_name(binding)
    packet = getattr(torch.ops, NAMESPACE)
    if hasattr(packet, name):
        return getattr(packet, name).default
    if not _LIBRARY:
        _LIBRARY.append(torch.library.Library(NAMESPACE, "FRAGMENT"))
    library = _LIBRARY[0]
    arguments, has_kwarg_only = schema_argument_text(binding.overload._schema)
    outputs = len(binding.opdef.outputs)
    star = "" if has_kwarg_only else "*, "
    library.define(f"{name}({_ENCODING_SCHEMA}, {arguments}) -> {returns_schema(outputs, out=False)}")
    library.define(
        f"{name}.out({_ENCODING_SCHEMA}, {arguments}, {star}{out_arguments(outputs)}) -> "
        f"{returns_schema(outputs, out=True)}"
    )
    reference = _reference(binding)
    library.impl(name, reference, "CompositeExplicitAutograd")
    library.impl(f"{name}.out", out_kernel_of(reference, outputs), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", _fake(binding), lib=library)
    torch.library.register_fake(f"{NAMESPACE}::{name}.out", out_fake_of(outputs), lib=library)
    return getattr(packet, name).default


def _reference(binding: OpBinding):
    """Eager semantics: dequantize, run the op in float, requantize -- what the kernel's
    quantized branch approximates."""
    return _around_the_op(binding, dequantize_codes, quantize_codes)


def _fake(binding: OpBinding):
    """Shapes and storage dtypes, from the op's own fake kernel on float stand-ins."""
    return _around_the_op(
        binding,
        lambda value, encoding: torch.empty_like(value, dtype=torch.float32) if encoding.is_quantized else value,
        lambda result, encoding: torch.empty_like(result, dtype=storage_dtype(encoding, result.dtype)),
    )


def _around_the_op(binding: OpBinding, into_float, out_of_float):
    """The variant's kernel: ``into_float`` on each input with its encoding, the original op,
    ``out_of_float`` on each output with its encoding."""
    op_inputs = binding.inputs
    outputs = len(binding.opdef.outputs)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        encodings = _encodings(*args[: len(ENCODING_ARGUMENTS)])
        values = list(args[len(ENCODING_ARGUMENTS) :])
        for index, arg in enumerate(op_inputs):
            if arg.schema_index < len(values) and values[arg.schema_index] is not None:
                values[arg.schema_index] = into_float(values[arg.schema_index], encodings[index])
        results = binding.overload(*values, **kwargs)
        results = (results,) if outputs == 1 else tuple(results)
        converted = tuple(out_of_float(r, e) for r, e in zip(results, encodings[len(op_inputs) :]))
        return converted[0] if outputs == 1 else converted

    return kernel


_BY_KERNEL_VALUE = {row.abi_value: row.datatype for row in kernel_rows()}


def _encodings(dtypes: Sequence[int], scales: Sequence[float], offsets: Sequence[int]) -> list[Encoding]:
    return [Encoding(_BY_KERNEL_VALUE[int(d)], float(s), int(o)) for d, s, o in zip(dtypes, scales, offsets)]


def storage_dtype(encoding: Encoding, plain: torch.dtype) -> torch.dtype:
    """The torch dtype a tensor of ``encoding`` is stored in (``plain`` when unquantized)."""
    if not encoding.is_quantized:
        return plain
    storage = DATATYPES[encoding.datatype].pt2e_storage
    if storage is None:
        raise QuantizedEmulationError(f"{encoding.datatype.short_name} tensors cannot be passed to a kernel")
    return getattr(torch, storage)


def dequantize_codes(tensor: torch.Tensor, encoding: Encoding | None) -> torch.Tensor:
    """The reals that ``tensor``'s codes stand for under ``encoding`` (a plain tensor as it is)."""
    if encoding is None or not encoding.is_quantized:
        return tensor
    return torch.tensor(encoding.scale, dtype=torch.float32) * (tensor.to(torch.int64) + encoding.offset).float()


def quantize_codes(tensor: torch.Tensor, encoding: Encoding | None) -> torch.Tensor:
    """``tensor``'s codes under ``encoding``, rounded and clamped (a plain tensor as it is)."""
    if encoding is None or not encoding.is_quantized:
        return tensor
    low, high = encoding.datatype.integer_range
    inverse = 1 / torch.tensor(encoding.scale, dtype=torch.float32)
    q = torch.round(tensor.float() * inverse) - encoding.offset
    q = torch.nan_to_num(q, nan=float(low)).clamp(low, high)
    return q.to(storage_dtype(encoding, tensor.dtype))


def assert_finite(encoding: Encoding, where: str) -> None:
    """Refuse an encoding a kernel cannot use (zero, negative or non-finite scale)."""
    if not (math.isfinite(encoding.scale) and encoding.scale > 0):
        raise QuantizedEmulationError(f"{where}: scale {encoding.scale} is not a positive finite number")
