"""Quantized IO of QNN programs: the inputs and outputs a device runner passes as codes.

ExecuTorch's QNN lowering puts a quantize after each float input and a dequantize before each
float output unless the node is tagged (``TagQuantIO``, ``QCOM_QUANTIZED_IO``) and the program's
IO specs are rebuilt (``BuildQuantIo``). ExecuTorch's ``qnn_llama_runner`` holds the attention
masks, the KV caches and the logits as codes, in uint8 or uint16 buffers only (its
``getDtypeSize``): a tagged tensor is passed as codes of its encoding's width in an unsigned
buffer. A signed encoding's codes (the 16-bit caches) travel as their two's-complement bits:
QAIRT 2.51's HTP reads a uint16 cache buffer holding int16 codes bit for bit (measured on the
x86 simulator: an offset of half the range instead puts every value 32768 steps off).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from executorch.backends.qualcomm.utils.constants import QCOM_QUANTIZED_IO
from executorch.exir.delegate import executorch_call_delegate
from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from ..errors import ReportedError
from ..torch_bridge.quantized import Encoding, encoding_of, is_dequantize, is_quantize, storage_dtype

#: The code dtypes of ExecuTorch's LLM runners, by bit width.
RUNNER_CODE_DTYPES = {8: torch.uint8, 16: torch.uint16}


class QuantizedIoError(ReportedError, ValueError):
    """An input or output whose codes no device runner holds (neither 8 nor 16 bits)."""


@dataclass(frozen=True)
class QuantizedIo:
    """One method's IO passed as codes: user inputs by placeholder name, outputs by position."""

    inputs: Mapping[str, torch.dtype]
    outputs: Mapping[int, torch.dtype]

    def dtype_of(self, node: torch.fx.Node) -> torch.dtype | None:
        """``TagQuantIO``'s question: the code dtype of ``node`` if it is quantized IO, else None."""
        if node.op == "placeholder":
            return self.inputs.get(node.name)
        for user in node.users:
            if user.op == "output":
                results: Sequence[Any] = user.args[0]  # type: ignore[assignment]
                return self.outputs.get(list(results).index(node))
        return None


def quantized_io(program: torch.export.ExportedProgram) -> QuantizedIo:
    """Every user input whose first use is a quantize, and every output a dequantize gives, as
    codes of its encoding's width (the names and positions survive QNN's edge passes)."""
    user_inputs = set(program.graph_signature.user_inputs)
    inputs = {
        node.name: _code_dtype(encoding_of(quantize), node.name)
        for node in program.graph.nodes
        if node.op == "placeholder" and node.name in user_inputs
        for quantize in [next((u for u in node.users if is_quantize(u)), None)]
        if quantize is not None
    }
    (output,) = [n for n in program.graph.nodes if n.op == "output"]
    outputs = {
        index: _code_dtype(encoding_of(node), f"output {index}")
        for index, node in enumerate(output.args[0])
        if is_dequantize(node)
    }
    return QuantizedIo(inputs, outputs)


def to_io_codes(codes: torch.Tensor, encoding: Encoding | None) -> torch.Tensor:
    """``codes`` (as PT2E stores them: int16 for a signed 16-bit encoding, int32 for an unsigned
    one) as a program lowered with ``codes_io`` takes them; an unquantized tensor as it is."""
    if encoding is None or not encoding.is_quantized:
        return codes
    return _recast(codes, _code_dtype(encoding, "an input"))


def from_io_codes(codes: torch.Tensor, encoding: Encoding | None) -> torch.Tensor:
    """A ``codes_io`` program's output codes as PT2E stores them (``to_io_codes`` undone)."""
    if encoding is None or not encoding.is_quantized:
        return codes
    return _recast(codes, storage_dtype(encoding, codes.dtype))


def _recast(codes: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The same codes in ``dtype``: bit for bit at the same width (a signed code's bits), by
    value into a wider or narrower one (every code of the encoding fits both)."""
    if codes.dtype.itemsize == dtype.itemsize:
        return codes.view(dtype)
    return codes.to(dtype)


def _code_dtype(encoding: Encoding, what: str) -> torch.dtype:
    low, high = encoding.datatype.integer_range
    bits = (high - low).bit_length()
    if bits not in RUNNER_CODE_DTYPES:
        raise QuantizedIoError(
            f"{what}: {encoding.datatype.short_name} codes ({bits} bits): a device runner holds 8- or 16-bit "
            "codes only; quantize it to 8 or 16 bits"
        )
    return RUNNER_CODE_DTYPES[bits]


class DelegatesTracedOnCodes(PassBase):
    """Each QNN delegate's float original made to take the codes its quantized inputs now are.

    ``to_executorch`` re-traces the program, delegates included, on its inputs' values: after
    ``BuildQuantIo`` those are uint8/uint16 codes, and the delegate's float original (its Q/DQ
    folded into encodings by QNN's passes) refuses them where its first op checks dtypes (a
    cache read by ``matmul``: "expected scalar type float32 but found uint16"). A cast to float
    after each such input lets the trace through; the original computes nothing on the device
    (the context binary does), only the delegate's output shapes here. ExecuTorch's own LLM
    graphs pass the same trace by chance: their caches meet ``cat`` first, which promotes."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        modified = False
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and node.target is executorch_call_delegate:
                lowered = getattr(graph_module, node.args[0].target)
                codes = [isinstance(a, torch.fx.Node) and QCOM_QUANTIZED_IO in a.meta for a in node.args[1:]]
                modified |= _cast_to_float(lowered.original_module, codes)
        return PassResult(graph_module, modified)


def _cast_to_float(program: torch.export.ExportedProgram, codes: Sequence[bool]) -> bool:
    """A float cast after each of ``program``'s user inputs flagged in ``codes`` (in order)."""
    graph = program.graph
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    flagged = [placeholders[name] for name, code in zip(program.graph_signature.user_inputs, codes) if code]
    for placeholder in flagged:
        users = list(placeholder.users)
        with graph.inserting_after(placeholder):
            cast = graph.call_function(exir_ops.edge.aten._to_copy.default, (placeholder,), {"dtype": torch.float32})
        cast.meta["val"] = placeholder.meta["val"]
        for user in users:
            user.replace_input_with(placeholder, cast)
    if flagged:
        program.graph_module.recompile()
    return bool(flagged)
