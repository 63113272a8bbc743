"""An export's ``manifest.json`` values to and from JSON, each typed and ranged as it is read
(``json_values``), and the manifest's own checksum: nothing is sized by a value not checked."""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, fields
from typing import Any

from ..opdef import Datatype
from ..torch_bridge.quantized import Encoding
from .json_values import JsonValueError, integer, mapping, number, required, sequence, string
from .runner_loop import MethodEncodings
from .shapes import LlmShape

#: The largest value a size of the programs takes (ExecuTorch's sizes are int32).
LARGEST_SIZE = 2**31 - 1
#: A manifest is kilobytes; a file of more is not one.
MANIFEST_LIMIT = 16 << 20


def checksum(body: dict[str, Any]) -> str:
    """The sha256 of a manifest's values but ``checksum`` (their canonical JSON): an edit to any
    value, or a flipped bit in it, changes it."""
    values = {key: value for key, value in body.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(values, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def shape_from_json(value: object) -> LlmShape:
    """``LlmShape`` of the manifest's ``shape``: every field of its type, sizes from 1 to
    ``LARGEST_SIZE``, a prefill no longer than the context."""
    body = mapping(value, "shape")
    unknown = sorted(set(body) - {f.name for f in fields(LlmShape)})
    if unknown:
        raise JsonValueError(f"shape.{unknown[0]} is not a value of an LlmShape")
    values: dict[str, Any] = {}
    for field in fields(LlmShape):
        key = f"shape.{field.name}"
        if field.name not in body:
            if field.default is MISSING:
                raise JsonValueError(f"no {key!r}")
            continue
        given, kind = body[field.name], str(field.type)
        if given is None and kind.endswith("| None"):
            values[field.name] = None
        elif kind.startswith("int"):
            values[field.name] = integer(given, key, 1, LARGEST_SIZE)
        else:
            values[field.name] = string(given, key)
    shape = LlmShape(**values)
    if shape.prefill_len > shape.ctx_len:
        raise JsonValueError(f"shape.prefill_len {shape.prefill_len} is longer than shape.ctx_len {shape.ctx_len}")
    return shape


def _encoding_to_json(encoding: Encoding | None) -> dict[str, Any] | None:
    if encoding is None:
        return None
    return {"datatype": encoding.datatype.short_name, "scale": encoding.scale, "offset": encoding.offset}


def _encoding_from_json(value: object, key: str) -> Encoding | None:
    if value is None:
        return None
    body = mapping(value, key)
    name = string(required(body, "datatype", f"{key}."), f"{key}.datatype")
    if name not in Datatype.__members__:
        raise JsonValueError(f"{key}.datatype is {name!r}, not a QNN datatype")
    return Encoding(
        Datatype[name],
        number(required(body, "scale", f"{key}."), f"{key}.scale", 0.0, above=True),
        integer(required(body, "offset", f"{key}."), f"{key}.offset", -(2**32), 2**32),
    )


def encodings_to_json(encodings: dict[str, MethodEncodings] | None) -> dict[str, Any] | None:
    if encodings is None:
        return None
    return {
        name: {"inputs": [_encoding_to_json(e) for e in m.inputs], "outputs": [_encoding_to_json(e) for e in m.outputs]}
        for name, m in encodings.items()
    }


def encodings_from_json(value: object, methods: tuple[str, ...]) -> dict[str, MethodEncodings] | None:
    """Per method of ``methods`` (each one, no other), its inputs' and outputs' encodings."""
    if value is None:
        return None
    body = mapping(value, "encodings")
    if sorted(body) != sorted(methods):
        raise JsonValueError(f"encodings names {', '.join(sorted(body)) or 'no method'}, not {', '.join(methods)}")

    def listed(method: str, side: str) -> tuple[Encoding | None, ...]:
        key = f"encodings.{method}.{side}"
        items = sequence(required(mapping(body[method], f"encodings.{method}"), side, f"encodings.{method}."), key)
        return tuple(_encoding_from_json(item, f"{key}[{i}]") for i, item in enumerate(items))

    return {method: MethodEncodings(listed(method, "inputs"), listed(method, "outputs")) for method in methods}


def _runner_shapes(shape: LlmShape, ar: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """A method's input and output shapes in the runner's layout, for ``ar`` tokens a call."""
    b, kv, hd, rest = shape.batch, shape.kv_heads, shape.head_dim, shape.ctx_len - ar
    inputs = [(b, ar), *[(b, 1, ar, shape.ctx_len)] * shape.masks, (b, ar)]
    inputs += [(b, kv, hd, rest)] * shape.layers + [(b, kv, rest, hd)] * shape.layers
    outputs = [(b, ar, shape.vocab), *[(b, kv, hd, ar)] * shape.layers, *[(b, kv, ar, hd)] * shape.layers]
    return inputs, outputs


def check_against_program(
    shape: LlmShape, encodings: dict[str, MethodEncodings] | None, pte: bytes, where: str
) -> None:
    """The manifest's shape and encodings are the program's own (its methods' input and output
    shapes, quantized or float), checked before the host loop sizes a cache by them."""
    from ..lowering.quantized_io import RUNNER_CODE_DTYPES
    from ..runtime import method_specs
    from ..runtime.loading import program_operators

    methods = {"prefill_forward": shape.prefill_len, "kv_forward": 1}
    takes_codes = False  # a QNN program lowered with codes IO: its mask, caches and logits are codes
    for method, ar in methods.items():
        specs = method_specs(pte, method, f"{where}'s program")
        takes_codes |= any(spec.dtype in RUNNER_CODE_DTYPES.values() for spec in specs[0])
        inputs, outputs = ([tuple(spec.shape) for spec in side] for side in specs)
        expected_inputs, expected_outputs = _runner_shapes(shape, ar)
        for side, expected, actual in (("inputs", expected_inputs, inputs), ("outputs", expected_outputs, outputs)):
            if expected != actual:
                raise JsonValueError(
                    f"its shape ({shape.layers} layers, ctx_len {shape.ctx_len}, prefill_len {shape.prefill_len}, "
                    f"vocab {shape.vocab}) is not the program's: {method}'s {side} would be {expected}, the "
                    f"program's are {actual}"
                )
        if encodings is not None:
            counts = (len(encodings[method].inputs), len(encodings[method].outputs))
            if counts != (len(inputs), len(outputs)):
                raise JsonValueError(
                    f"encodings.{method} lists {counts[0]} inputs and {counts[1]} outputs, the program's method "
                    f"takes {len(inputs)} and gives {len(outputs)}"
                )
    quantized = takes_codes or any(
        op.startswith(("qco_quantized::", "quantized_decomposed::")) for op in program_operators(pte)
    )
    if quantized != (encodings is not None):
        said, holds = ("quantized", "a float") if encodings is not None else ("float", "a quantized")
        raise JsonValueError(f"it describes a {said} program, and the program is {holds} one")
