"""Reading a Hugging Face checkpoint directory: whole (``load_checkpoint``: the model in float32,
as transformers loads it) or a layer at a time (``load_by_layer``).

Read a layer at a time, the model is built with its parameters unallocated (address space, no
memory, until written); each decoder layer's weights, then the embedding, final norm and head, are
read from the memory-mapped safetensors files, made float32, swapped onto the library's ops
(``swap_modules``) and written to a store on disk (``OffloadedWeights``), and their memory is given
back before the next layer is read. Calibration and conversion then read from the store what they
need when they need it (``layer_stages``), so an export holds one layer in float32 at a time: an
8B model is 32 GB in float32 on a 24 GB machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..errors import UsageError
from ..llm_ops.swap import Swap, swap_modules
from ..progress import Progress, silent
from .config_checks import check_config, check_tokenizer_files, check_weights, first_line, weight_files
from .hf import warn_float32_cast


class LlmCheckpointError(UsageError):
    """A checkpoint, an export directory or an option ``llm export``/``llm generate`` cannot use."""


def config_and_tokenizer(directory: Path) -> tuple[Any, Any]:
    """The checkpoint's transformers config and tokenizer, read locally only, once ``config.json``
    and the safetensors headers pass ``config_checks`` (anything transformers still refuses is one
    line too)."""
    import transformers

    if not (directory / "config.json").is_file():
        raise LlmCheckpointError(f"{directory}: no config.json; pass a Hugging Face checkpoint directory")
    check_weights(directory, check_config(directory))  # an unsupported family is refused before any weight is read
    check_tokenizer_files(directory)
    try:
        config = transformers.AutoConfig.from_pretrained(directory, local_files_only=True)
    except Exception as exc:  # transformers' own checks raise every kind
        raise LlmCheckpointError(
            f"{directory}/config.json: transformers cannot read it ({type(exc).__name__}: {first_line(exc)})"
        ) from None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except Exception as exc:  # the tokenizers library raises bare Exceptions for a damaged file
        raise LlmCheckpointError(
            f"{directory}: no tokenizer transformers can load ({type(exc).__name__}: {first_line(exc)}); save one "
            "beside the weights (tokenizer.save_pretrained)"
        ) from None
    stored = getattr(config, "dtype", None)
    if isinstance(stored, torch.dtype) and stored != torch.float32:
        warn_float32_cast(str(directory), {stored})
    return config, tokenizer


def _missing(directory: Path, kind: str, names: list[str]) -> LlmCheckpointError:
    return LlmCheckpointError(
        f"{directory}: the weights {'lack' if kind == 'missing_keys' else 'have another shape for'} "
        f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''} ({len(names)} in all), which the "
        "model would get as random values: save the whole checkpoint again"
    )


def _check_finite(directory: Path, name: str, tensor: torch.Tensor) -> None:
    """A weight of NaN or infinite values makes every output so: refused (a sum is 10 GB/s here,
    isfinite 0.3, so the sum is asked first)."""
    if not math.isfinite(float(tensor.sum())) and not bool(torch.isfinite(tensor).all()):
        raise LlmCheckpointError(
            f"{directory}: weight {name} holds NaN or infinite values, so would every output: use a "
            "checkpoint whose weights are finite"
        )


def load_checkpoint(directory: Path, progress: Progress = silent) -> tuple[Any, Any]:
    """The causal LM (eager attention, float32) and tokenizer of a checkpoint directory, the whole
    model in memory (``load_by_layer`` holds a layer at a time)."""
    import transformers

    config, tokenizer = config_and_tokenizer(directory)
    started = time.monotonic()
    try:
        loaded: Any = transformers.AutoModelForCausalLM.from_pretrained(  # float32 as read: never bf16 and fp32
            directory,
            local_files_only=True,
            attn_implementation="eager",
            dtype=torch.float32,
            output_loading_info=True,
            ignore_mismatched_sizes=True,  # named below, where transformers would point at a log
        )
        model, loading = loaded
    except Exception as exc:  # transformers' and safetensors' errors of every kind
        raise LlmCheckpointError(
            f"{directory}: transformers cannot load the weights ({type(exc).__name__}: {first_line(exc)})"
        ) from None
    for kind in ("missing_keys", "mismatched_keys"):  # transformers would fill them with random values
        absent = sorted(str(key[0] if isinstance(key, tuple) else key) for key in loading.get(kind) or ())
        if absent:
            raise _missing(directory, kind, absent)
    for name, parameter in model.named_parameters():
        _check_finite(directory, name, parameter.detach())
    _weights_aligned(model)
    count = sum(p.numel() for p in model.parameters())
    progress(f"loaded {config.model_type} ({count / 1e6:.1f} M parameters) in {time.monotonic() - started:.1f} s")
    return model.eval(), tokenizer


#: The alignment of memory torch allocates, in bytes.
_ALIGNMENT = 64


def _weights_aligned(model: torch.nn.Module) -> None:
    """Each parameter that is a view of the checkpoint's mapped file at an unaligned address (a
    float32 file's tensors, which transformers maps rather than copies, sit 8-byte aligned after its
    header) copied to memory of its own: the CPU's matrix kernels take another path on unaligned
    data, and a model so read computed other bits than the same weights read a layer at a time
    (``load_by_layer``): one calibration range off by an ulp on an AVX2 machine."""
    for parameter in model.parameters():
        if parameter.data_ptr() % _ALIGNMENT:
            parameter.data = parameter.data.clone()


def lazy_zeros(shape: torch.Size | tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Zeros that cost no memory until written: ``calloc``'s, which maps a large block fresh from
    the kernel (whose untouched pages read as zeros and take none) instead of clearing it.

    Never ``torch.empty``: a stand-in's values are read before its weight is (export and
    ExecuTorch's QNN annotation passes look at weights: ``RecomposeHadamard`` takes a square
    linear whose weight is a scaled Hadamard matrix for a ``hadamard_transform``, and leftover
    bytes near zero with one denormal matched it, dropping an ``o_proj`` at random)."""
    import numpy as np

    nbytes = math.prod(shape) * dtype.itemsize
    return torch.from_numpy(np.zeros(nbytes, dtype=np.uint8)).view(dtype).reshape(shape)


def _row_chunks(shape: torch.Size | tuple[int, ...]) -> int:
    """The rows of a weight of ``shape`` handled at once, ``_READ_ELEMENTS`` or one row: a weight is
    never copied whole (an 8B model's embedding is 2.1 GB in float32, 1.05 in bfloat16)."""
    return max(1, _READ_ELEMENTS // max(1, math.prod(shape[1:])))


def _exact_in_bfloat16(data: torch.Tensor) -> bool:
    """Whether bfloat16 holds ``data`` exactly, compared a chunk of rows at a time."""
    if data.dim() == 0:
        return torch.equal(data.to(torch.bfloat16).float(), data)
    return all(torch.equal(d.to(torch.bfloat16).float(), d) for d in data.split(_row_chunks(data.shape)))


def _read_float32(path: Path, key: str, shape: torch.Size | tuple[int, ...], rows: slice | None = None) -> torch.Tensor:
    """The tensor ``key`` of the safetensors file ``path`` (of ``shape``), float32; only ``rows`` of
    it, if given. Read a chunk of rows at a time, the file mapped anew for each: the pages of a
    mapped file stay resident while it is mapped, and a tensor read whole held its file, or its
    own copy in the file's width, beside its float32 copy (a 3B model's tied table: 0.73 GiB more)."""
    from safetensors import safe_open

    if not shape:
        with safe_open(str(path), framework="pt") as stored:
            return stored.get_tensor(key).float()
    start, stop, _ = (rows or slice(None)).indices(shape[0])
    tensor = torch.empty((stop - start, *shape[1:]), dtype=torch.float32)
    step = _row_chunks(shape)
    for first in range(start, stop, step):
        last = min(stop, first + step)
        with safe_open(str(path), framework="pt") as stored:
            tensor[first - start : last - start] = stored.get_slice(key)[first:last]
    return tensor


#: safetensors' names of the dtypes a store keeps.
_SAFETENSORS_DTYPES = {torch.bfloat16: "BF16", torch.float32: "F32"}


def _write_safetensors(path: Path, tensors: dict[str, tuple[torch.Tensor, torch.dtype]]) -> None:
    """A safetensors file of ``tensors`` (name: (tensor, dtype stored)), each converted and written a
    chunk of rows at a time: ``safetensors.torch.save_file`` takes whole tensors, so storing a
    float32 weight as bfloat16 held both (a 3B model's tied table: 2.2 GiB for 1.5, reading's peak).
    The format: an 8-byte little-endian header length, the JSON header (padded with spaces to 8
    bytes), then each tensor's bytes, row-major, at its ``data_offsets``."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (tensor, dtype) in tensors.items():
        size = tensor.numel() * dtype.itemsize
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(encoded)) + encoded)
        for tensor, dtype in tensors.values():
            for chunk in tensor.reshape(-1, *tensor.shape[1:]).split(_row_chunks(tensor.shape)):
                file.write(chunk.to(dtype).contiguous().reshape(-1).view(torch.uint8).numpy().data)


@dataclass
class OffloadedWeights:
    """The float weights of a model read a layer at a time, in safetensors files under
    ``directory`` (bfloat16 where that keeps a weight exactly, float32 otherwise), by parameter:
    ``offload`` writes a piece's parameters and gives their memory back; ``bind`` names them as a
    program does; ``read`` gives one back in float32."""

    directory: Path
    _keys: dict[int, tuple[Path, str, torch.Size]] = field(default_factory=dict)
    _names: dict[str, tuple[Path, str, torch.Size]] = field(default_factory=dict)

    def offload(self, parameters: list[torch.nn.Parameter]) -> None:
        """Write ``parameters`` to one file and leave them unallocated (each once, however often given)."""
        path = self.directory / f"{len({p for p, _, _ in self._keys.values()})}.safetensors"
        unique = {id(p): p for p in parameters if id(p) not in self._keys}
        tensors = {}
        for key, parameter in unique.items():
            data = parameter.detach().contiguous()
            tensors[f"w{key}"] = (data, torch.bfloat16 if _exact_in_bfloat16(data) else torch.float32)
        try:
            _write_safetensors(path, tensors)
        except OSError as exc:  # a full disk, a directory gone
            raise LlmCheckpointError(
                f"{self.directory}: cannot keep the weights read a layer at a time ({first_line(exc)}); "
                "free space on that disk, or give -o a directory on another (they need about the checkpoint's size)"
            ) from None
        for key, parameter in unique.items():
            self._keys[key] = (path, f"w{key}", parameter.shape)
            parameter.data = lazy_zeros(parameter.shape, parameter.dtype)

    def bind(self, module: torch.nn.Module) -> None:
        """Name the offloaded parameters as ``module`` (the static program's) names them."""
        for name, parameter in module.named_parameters(remove_duplicate=False):
            if id(parameter) in self._keys:
                self._names[name] = self._keys[id(parameter)]

    def __contains__(self, item: object) -> bool:
        """A program's weight name (``bind``), or a parameter already offloaded."""
        return id(item) in self._keys if isinstance(item, torch.nn.Parameter) else item in self._names

    def read(self, name: str, rows: slice | None = None) -> torch.Tensor:
        """The weight ``name`` (as ``bind`` named it), float32; only ``rows`` of it, if given
        (``_read_float32``: a chunk of its file mapped at a time)."""
        path, key, shape = self._names[name]
        return _read_float32(path, key, shape, rows)

    def placeholder(self, name: str) -> torch.Tensor:
        """An unallocated stand-in of the weight ``name``, to give a read weight's memory back."""
        return lazy_zeros(self._names[name][2], torch.float32)


#: The elements of a weight read, converted or written at once: 32 MB of bfloat16.
_READ_ELEMENTS = 1 << 24

#: glibc's ``mallopt`` parameter of the size from which a block is mapped on its own.
_M_MMAP_THRESHOLD = -3
#: The highest glibc's own threshold grows to on 64-bit (its ``DEFAULT_MMAP_THRESHOLD_MAX``).
_GLIBC_THRESHOLD_MAX = 32 << 20


def _set_mmap_threshold(size: int) -> None:
    """glibc's mmap threshold fixed at ``size`` for the process; nothing to do without glibc."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, size)
    except (OSError, AttributeError):
        pass


class _MmapThreshold:
    """glibc's mmap threshold at 1 MiB while a model is read, calibrated and converted a layer at a
    time (``large_blocks_given_back``), and where glibc's own growth takes it (32 MiB) after.

    At 1 MiB a block of 1 MiB or more is mapped on its own, so freeing a layer gives its memory
    back. glibc raises its threshold each time such a block is freed, after which a layer's tensors
    come from its heap and stay there once freed: reading a model a layer at a time grew by about
    a layer's float32 bytes per layer (measured: 15 MB a layer of a 50 M-parameter model; 1.4 MB
    with the threshold fixed). After, freed blocks stay mapped again, as a QNN lowering's compile
    was measured with: QAIRT's graph preparation crashed now and then, more often with freed
    blocks unmapped at once, until the QHPI package it read was no longer unloaded under it
    (``-z nodelete``, its Makefile). glibc has no getter, so nested blocks are counted."""

    def __init__(self) -> None:
        self._depth = 0

    @contextlib.contextmanager
    def lowered(self) -> Iterator[None]:
        self._depth += 1
        if self._depth == 1:
            _set_mmap_threshold(1 << 20)
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                _set_mmap_threshold(_GLIBC_THRESHOLD_MAX)


#: Blocks of 1 MiB and more unmapped when freed within, kept mapped again after (``_MmapThreshold``).
large_blocks_given_back = _MmapThreshold().lowered


@contextlib.contextmanager
def _params_unallocated() -> Iterator[None]:
    """Every parameter registered within is made unallocated (``lazy_zeros``)."""
    original = torch.nn.Module.register_parameter

    def register(module: torch.nn.Module, name: str, parameter: torch.nn.Parameter | None) -> None:
        if parameter is not None:
            parameter = torch.nn.Parameter(
                lazy_zeros(parameter.shape, parameter.dtype), requires_grad=parameter.requires_grad
            )
        original(module, name, parameter)

    torch.nn.Module.register_parameter = register  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]


class _CheckpointTensors:
    """The checkpoint's tensors by name, read from their memory-mapped safetensors files one at a time."""

    def __init__(self, directory: Path):
        from safetensors import safe_open

        self.directory = directory
        self.files: dict[str, Path] = {}
        for path in weight_files(directory):
            with safe_open(str(path), framework="pt") as stored:
                self.files.update(dict.fromkeys(stored.keys(), path))

    def fill(self, wanted: list[tuple[str, torch.nn.Parameter]]) -> None:
        """Each parameter read in float32 from the checkpoint's tensor of its name."""
        from safetensors import safe_open

        absent = sorted(name for name, _ in wanted if name not in self.files)
        if absent:
            raise _missing(self.directory, "missing_keys", absent)
        for name, parameter in wanted:
            with safe_open(str(self.files[name]), framework="pt") as stored:
                shape = tuple(stored.get_slice(name).get_shape())
            if shape != tuple(parameter.shape):
                raise _missing(self.directory, "mismatched_keys", [name])
            parameter.data = _read_float32(self.files[name], name, shape)
            _check_finite(self.directory, name, parameter.data)


def _swapped(parent: torch.nn.Module, name: str, path: str) -> list[Swap]:
    """``swap_modules`` on ``parent.<name>`` alone (its parameters read, the model's others not),
    the swaps named by their path in the model."""
    holder = torch.nn.ModuleDict({name: getattr(parent, name)})
    swaps = swap_modules(holder)
    setattr(parent, name, holder[name])
    prefix = f"{path}." if path else ""
    return [replace(swap, path=prefix + swap.path) for swap in swaps]


@large_blocks_given_back()
def load_by_layer(
    directory: Path, store: Path, progress: Progress = silent
) -> tuple[Any, Any, list[Swap], OffloadedWeights]:
    """The checkpoint's causal LM with its weights offloaded to ``store`` a layer at a time (see
    the module docstring), swapped onto the library's ops; its tokenizer; the swaps; the store.
    Blocks of 1 MiB are given back when freed while it reads (``large_blocks_given_back``)."""
    import transformers

    config, tokenizer = config_and_tokenizer(directory)
    config._attn_implementation = "eager"
    started = time.monotonic()
    from transformers.initialization import no_init_weights

    with _params_unallocated(), no_init_weights():  # nothing written: initializing would allocate them all
        model: Any = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.tie_weights()
    model.eval()
    tensors, weights, swaps = _CheckpointTensors(directory), OffloadedWeights(store), []
    decoder = model.model
    for index in range(len(decoder.layers)):
        tensors.fill([(f"model.layers.{index}.{n}", p) for n, p in decoder.layers[index].named_parameters()])
        swaps += _swapped(decoder.layers, str(index), "model.layers")
        weights.offload(list(decoder.layers[index].parameters()))
        progress(f"read layer {index + 1} of {len(decoder.layers)} ({time.monotonic() - started:.1f} s)")
    for owner, path in ((decoder, "model"), (model, "")):  # the embedding, final norm, head: one at a time
        for name in [n for n, _ in owner.named_children() if n not in ("layers", "model")]:
            prefix = f"{path}.{name}." if path else f"{name}."
            named = [(prefix + n, p) for n, p in getattr(owner, name).named_parameters() if p not in weights]
            tensors.fill(named)  # a head tied to the embedding was read with it
            swaps += _swapped(owner, name, path)
            weights.offload(list(getattr(owner, name).parameters()))
    count = sum(p.numel() for p in model.parameters())
    progress(
        f"read {config.model_type} ({count / 1e6:.1f} M parameters) a layer at a time in "
        f"{time.monotonic() - started:.1f} s"
    )
    return model, tokenizer, swaps, weights
