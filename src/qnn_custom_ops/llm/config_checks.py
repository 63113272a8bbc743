"""A checkpoint directory checked before transformers reads it: ``config.json``'s values (types,
sizes, the heads' arithmetic, RoPE parameters) and the safetensors files' headers (lengths,
dtypes, offsets, the index's file names), each problem one line naming the file and the value.
Transformers would otherwise fail deep inside (a ZeroDivisionError, an IndexError, a
SafetensorError), allocate what a wrong size asks for, or cast integer weights silently."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .export_files import relative_path
from .families import family_of
from .json_values import JsonValueError, integer, load_object, mapping, number, required, sequence, string

#: config.json and a safetensors index are kilobytes; safetensors refuses headers past 100 MB.
CONFIG_LIMIT, HEADER_LIMIT = 16 << 20, 100_000_000
#: Sizes a config may hold, from 1 to ExecuTorch's largest (its sizes are int32).
_SIZES = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "sliding_window",
    "original_max_position_embeddings",
)
_LARGEST = 2**31 - 1
#: Values that must be numbers above zero where a config holds them.
_POSITIVE = (
    "rms_norm_eps",
    "rope_theta",
    "query_pre_attn_scalar",
    "embedding_multiplier",
    "residual_multiplier",
    "logits_scaling",
    "attention_multiplier",
    "final_logit_softcapping",
    "attn_logit_softcapping",
)
#: Bytes per element of each floating-point safetensors dtype (an integer one is refused).
_FLOAT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
_INTEGER_DTYPES = ("BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64")
INDEX, WEIGHTS = "model.safetensors.index.json", "model.safetensors"


class CheckpointFileError(UsageError):
    """A checkpoint file whose values transformers would fail on, or read wrongly."""


def first_line(error: BaseException) -> str:
    """An exception's message as one line (transformers' run over several)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def check_config(directory: Path) -> dict[str, Any]:
    """``config.json``'s values, checked: the family one of ours, every value the type the
    family's config gives it, sizes whole and positive, the heads dividing, RoPE parameters
    numbers. One ``CheckpointFileError`` naming the value otherwise."""
    path = directory / "config.json"
    try:
        body = load_object(path, CONFIG_LIMIT)
        family_of(string(required(body, "model_type"), "model_type"))
        _check_types(body)
        _check_sizes(body)
        for key in ("rope_parameters", "rope_scaling"):
            if body.get(key) is not None:
                _check_rope(mapping(body[key], key), key)
    except JsonValueError as exc:
        raise CheckpointFileError(f"{path}: {exc}; fix it, or save the config again (config.save_pretrained)") from None
    return body


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_types(body: dict[str, Any]) -> None:
    """Each value of the kind the family's own config class gives it by default: a flag a
    boolean, a number a number (a token id may be a list of them: Llama 3's and Gemma 3's eos)."""
    import transformers

    defaults = transformers.CONFIG_MAPPING[body["model_type"]]().to_dict()
    for key, value in body.items():
        default = defaults.get(key)
        if default is None or value is None:
            continue
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif _is_number(default):
            ids = key.endswith("_token_id") and isinstance(value, list)
            ok = _is_number(value) or (ids and all(isinstance(i, int) and not isinstance(i, bool) for i in value))
        else:
            ok = isinstance(value, type(default))
        if not ok:
            kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list"}
            kind = kinds.get(type(default), "an object")
            raise JsonValueError(f"{key} is {value!r}, where {body['model_type']} takes {kind}")


def _check_sizes(body: dict[str, Any]) -> None:
    for key in _SIZES:
        if body.get(key) is not None:
            integer(body[key], key, 1, _LARGEST)
    for key in _POSITIVE:
        if body.get(key) is not None:
            number(body[key], key, 0.0, above=True)
    heads = body.get("num_attention_heads")
    kv_heads = body.get("num_key_value_heads") or heads
    if heads is not None and heads % kv_heads:
        raise JsonValueError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    hidden, head_dim = body.get("hidden_size"), body.get("head_dim")
    if head_dim is None and hidden is not None and heads is not None:
        if hidden % heads:
            raise JsonValueError(
                f"hidden_size {hidden} does not divide into num_attention_heads {heads} (give head_dim)"
            )
        head_dim = hidden // heads
    if head_dim is not None and head_dim % 2:
        raise JsonValueError(f"head_dim {head_dim} is odd; rotary embeddings turn pairs of its values")
    factor = body.get("partial_rotary_factor")
    if factor is not None:
        number(factor, "partial_rotary_factor", 0.0, above=True)
        if factor > 1:
            raise JsonValueError(f"partial_rotary_factor is {factor}, more than 1")
    types = body.get("layer_types")
    if types is not None and body.get("num_hidden_layers") is not None:
        names = [string(t, "layer_types[]") for t in sequence(types, "layer_types")]
        if len(names) != body["num_hidden_layers"]:
            raise JsonValueError(
                f"layer_types names {len(names)} layers, num_hidden_layers is {body['num_hidden_layers']}"
            )


def _check_rope(parameters: dict[str, Any], key: str) -> None:
    """RoPE parameters (per layer type when nested, as Gemma 3's): the type a string, every other
    value a positive number or a list of them."""
    if parameters and all(isinstance(value, dict) for value in parameters.values()):
        for name, nested in parameters.items():
            _check_rope(nested, f"{key}.{name}")
        return
    for name, value in parameters.items():
        where = f"{key}.{name}"
        if name in ("rope_type", "type"):
            string(value, where)
        elif isinstance(value, list):
            for item in value:
                number(item, f"{where}[]", 0.0, above=True)
        elif value is not None and not isinstance(value, bool):
            number(value, where, 0.0, above=True)


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header: its dtype, shape and place in the file's data."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def check_weights(directory: Path, config: dict[str, Any]) -> None:
    """Every safetensors file the checkpoint loads from (``model.safetensors``, or the ones its
    index names, inside the directory), each header whole and consistent with its file, every
    tensor floating point, and the embedding and layers the sizes ``config`` says."""
    entries = [entry for path in weight_files(directory) for entry in read_header(path)]
    embedding = next((e for e in entries if e.name.endswith("embed_tokens.weight")), None)
    expected = (config.get("vocab_size"), config.get("hidden_size"))
    if embedding is not None and None not in expected and embedding.shape != expected:
        raise CheckpointFileError(
            f"{directory}/config.json: vocab_size x hidden_size is {expected[0]} x {expected[1]}, and the weights' "
            f"{embedding.name} is {' x '.join(map(str, embedding.shape))}: the config is not these weights'"
        )
    layers = {int(m.group(1)) for e in entries if (m := re.search(r"\blayers\.(\d+)\.", e.name))}
    if layers and config.get("num_hidden_layers") is not None and max(layers) + 1 != config["num_hidden_layers"]:
        raise CheckpointFileError(
            f"{directory}/config.json: num_hidden_layers is {config['num_hidden_layers']}, and the weights hold "
            f"{max(layers) + 1} layers: the config is not these weights'"
        )


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files transformers would read: those the index names, else ``model.safetensors``."""
    index = directory / INDEX
    if not index.is_file():
        return [directory / WEIGHTS] if (directory / WEIGHTS).is_file() else []
    try:
        weight_map = mapping(required(load_object(index, CONFIG_LIMIT), "weight_map"), "weight_map")
        names = sorted(
            {relative_path(string(name, f"weight_map.{key}"), f"weight_map.{key}") for key, name in weight_map.items()}
        )
    except JsonValueError as exc:
        raise CheckpointFileError(f"{index}: {exc}; save the checkpoint again (save_pretrained)") from None
    files = [directory / name for name in names]
    for path in files:
        if not path.resolve().is_relative_to(directory.resolve()):
            raise CheckpointFileError(f"{index}: names {path}, outside the checkpoint directory; save it again")
        if not path.is_file():
            raise CheckpointFileError(f"{index}: names {path.name}, which is not in {directory}; copy it there")
    return files


def read_header(path: Path) -> list[TensorEntry]:
    """The tensors of a safetensors file, its header checked against the file: a length within
    it, JSON, dtypes floating point, each tensor's bytes its shape's, the data one run to the end."""
    size = path.stat().st_size
    damaged = "the file is damaged or not safetensors: copy or save it again"
    with path.open("rb") as stream:
        prefix = stream.read(8)
        length = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
        if length < 2 or length > min(HEADER_LIMIT, size - 8):
            raise CheckpointFileError(f"{path}: {size} bytes, whose header length {length} does not fit; {damaged}")
        raw = stream.read(length)
    try:
        header = mapping(_json(raw), "the header")
        entries = [_entry(name, value) for name, value in header.items() if name != "__metadata__"]
    except JsonValueError as exc:
        raise CheckpointFileError(f"{path}: {exc}; {damaged}") from None
    for entry in entries:
        if entry.dtype in _INTEGER_DTYPES:
            raise CheckpointFileError(
                f"{path}: tensor {entry.name} is {entry.dtype}, an integer dtype, in a float model (a quantized "
                "checkpoint?): export the float checkpoint"
            )
    data, offset = size - 8 - length, 0
    for entry in sorted(entries, key=lambda e: (e.begin, e.end)):
        if entry.begin != offset or entry.end > data:
            raise CheckpointFileError(
                f"{path}: tensor {entry.name}'s data at bytes {entry.begin}-{entry.end} is not where the file's "
                f"{data} bytes of data hold it (truncated?); {damaged}"
            )
        offset = entry.end
    if offset != data:
        raise CheckpointFileError(f"{path}: {data - offset} bytes after the last tensor's data; {damaged}")
    return entries


def _json(raw: bytes) -> object:
    import json

    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise JsonValueError("its header is not JSON") from None


def _entry(name: str, value: object) -> TensorEntry:
    body = mapping(value, f"tensor {name}")
    dtype = string(required(body, "dtype", f"tensor {name}: "), f"tensor {name}'s dtype")
    shape = tuple(integer(d, f"tensor {name}'s shape[]", 0, 2**62) for d in sequence(required(body, "shape"), "shape"))
    offsets = sequence(required(body, "data_offsets", f"tensor {name}: "), f"tensor {name}'s data_offsets")
    begin, end = (integer(o, f"tensor {name}'s data_offsets[]", 0, 2**62) for o in (offsets + [-1, -1])[:2])
    if len(offsets) != 2 or end < begin:
        raise JsonValueError(f"tensor {name}'s data_offsets are {offsets}, not [begin, end]")
    if dtype not in _INTEGER_DTYPES:
        itemsize = _FLOAT_BYTES.get(dtype)
        if itemsize is None:
            raise JsonValueError(f"tensor {name}'s dtype is {dtype!r}, not one of {', '.join(_FLOAT_BYTES)}")
        if end - begin != math.prod(shape) * itemsize:
            raise JsonValueError(
                f"tensor {name} ({dtype} {list(shape)}) needs {math.prod(shape) * itemsize} bytes, its data_offsets "
                f"give {end - begin}"
            )
    return TensorEntry(name, dtype, shape, begin, end)


#: Files a tokenizer is read from; without one, transformers makes an empty tokenizer of the family's class.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def check_tokenizer_files(directory: Path) -> None:
    """A checkpoint holds a tokenizer's vocabulary (transformers would make one of a single token)."""
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointFileError(
            f"{directory}: no tokenizer ({', '.join(TOKENIZER_FILES)}); save one beside the weights "
            "(tokenizer.save_pretrained)"
        )


def check_context(directory: Path, ctx_len: int) -> None:
    """``--ctx`` within the positions the checkpoint's model was made for, and its KV caches
    (float32, prefill's and decode's example inputs) within this machine's memory: refused
    before the checkpoint is loaded, where an export would try to allocate them."""
    if not (directory / "config.json").is_file():
        return  # load_checkpoint says so
    body = check_config(directory)
    positions = body.get("max_position_embeddings")
    if positions is not None and ctx_len > positions:
        raise CheckpointFileError(
            f"--ctx {ctx_len}: past the {positions} positions the model was made for (max_position_embeddings in "
            f"{directory}/config.json); export --ctx {positions} or less"
        )
    heads = body.get("num_attention_heads") or 1
    head_dim = body.get("head_dim") or (body.get("hidden_size") or 0) // heads
    per_position = 2 * (body.get("num_hidden_layers") or 0) * (body.get("num_key_value_heads") or heads) * head_dim
    cache_bytes = 2 * 4 * per_position * ctx_len
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if cache_bytes > machine:
        raise CheckpointFileError(
            f"--ctx {ctx_len}: the KV caches the export makes would take {cache_bytes / 1e9:.3g} GB, more than this "
            f"machine's {machine / 1e9:.3g} GB; export a shorter context"
        )
