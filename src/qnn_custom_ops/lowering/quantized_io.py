"""Quantized IO of QNN programs: the inputs and outputs a device runner passes as codes.

ExecuTorch's QNN lowering puts a quantize after each float input and a dequantize before each
float output unless the node is tagged (``TagQuantIO``, ``QCOM_QUANTIZED_IO``) and the program's
IO specs are rebuilt (``BuildQuantIo``). ExecuTorch's ``qnn_llama_runner`` holds the attention
masks, the KV caches and the logits as codes, in uint8 or uint16 buffers only (its
``getDtypeSize``): a tagged tensor is passed as codes of its encoding's width, signed encodings
included (QNN's IO convention carries those as unsigned codes offset by half the range).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ReportedError
from ..torch_bridge.quantized import Encoding, encoding_of, is_dequantize, is_quantize

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


def _code_dtype(encoding: Encoding, what: str) -> torch.dtype:
    low, high = encoding.datatype.integer_range
    bits = (high - low).bit_length()
    if bits not in RUNNER_CODE_DTYPES:
        raise QuantizedIoError(
            f"{what}: {encoding.datatype.short_name} codes ({bits} bits): a device runner holds 8- or 16-bit "
            "codes only; quantize it to 8 or 16 bits"
        )
    return RUNNER_CODE_DTYPES[bits]
