"""Each weight held once in memory while ExecuTorch delegates a program's methods to XNNPACK
(``weights_held_once``) or to QNN (``partitions_share_weights``).

Left to itself, ExecuTorch holds a delegated model's weights four times over: it copies each
partition whole before its backend preprocesses it (``copy_exported_program_for_preprocess``:
``copy.deepcopy``, weights included), XNNPACK serializes every weight into bytes of its own, once
per method (prefill and decode each have a ``NamedDataStore`` until the program is emitted), and
the weights themselves stay with the program. For a model of a few GB that is what decides
whether it can be lowered at all; a tied embedding is copied once more per method, for the
delegated ``lm_head`` (``duplicate_constant_node``). ``weights_held_once`` scopes three changes
to one lowering:

- the copy for preprocessing shares the weight tensors, and so does the copy of a constant
  two partitions use (XNNPACK's passes replace constants, they never write into them);
- a blob a backend hands the named-data store that is byte for byte a weight of the program
  being lowered is kept as a view of that weight (``TensorBackedData``), not as the bytes: the
  backend's own bytes are dropped at once, and the ``.pte`` is written from the weight.

The ``.pte`` is byte for byte what ExecuTorch writes without them. A program lowered with
``external_weights=True`` writes its data file from the same views: the named data XNNPACK adds
under a tag goes through the same ``add_named_data``, and ExecuTorch's merge of the emitter's
constants with it (``serialize_for_executorch``) moves references, never bytes.

QNN's lowering takes the first change alone (``partitions_share_weights(QnnBackend)``):
ExecuTorch copies every partition of every method before QNN compiles the first (at
Llama-3.1-8B's widths, 4 GB for two layers). QNN's context binaries carry a few bytes that differ
from one compile to the next, with or without it, so there the tests compare what the program
computes rather than its bytes.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir._serialize._cord import FileBackedData
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir.backend.canonical_partitioners import duplicate_constant_node_pass


class TensorBackedData(FileBackedData):
    """A blob of the named-data store that is a weight's own memory (ExecuTorch's stores and
    ``Cord`` take ``bytes`` or ``FileBackedData``; this is the latter's interface over a tensor)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self._tensor = tensor  # keeps the memory the view reads alive
        self._view = tensor.detach().reshape(-1).view(torch.uint8).numpy().data.toreadonly()
        self._size = len(self._view)
        self._sha256: bytes | None = None
        self._finalizer = None

    def matches(self, data: bytes) -> bool:
        return self._view == data

    def prefix(self, size: int) -> bytes:
        return bytes(self._view[:size])

    def sha256(self) -> bytes:
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self._view).digest()
        return self._sha256

    def to_bytes(self) -> bytes:
        return bytes(self._view)

    def write_to_file(self, outfile: io.BufferedIOBase) -> None:
        outfile.write(self._view)


class _Weights:
    """The weights of the partitions being preprocessed, by size: the candidates a serialized
    blob is compared with."""

    def __init__(self) -> None:
        self._by_size: dict[int, list[TensorBackedData]] = {}
        self._seen: set[int] = set()

    def add(self, tensors: Iterable[Any]) -> None:
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor) and tensor.is_contiguous() and id(tensor) not in self._seen:
                self._seen.add(id(tensor))
                blob = TensorBackedData(tensor)
                self._by_size.setdefault(len(blob), []).append(blob)

    def blob_for(self, data: Any) -> Any:
        """The weight ``data`` is a copy of, or ``data`` itself."""
        if isinstance(data, bytes):
            for blob in self._by_size.get(len(data), ()):
                if blob.matches(data):
                    return blob
        return data


def alias(memory: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A tensor on ``memory``'s storage, a (frozen) ``Parameter`` where ``like`` is one."""
    shared = memory.detach()
    return (
        torch.nn.Parameter(shared, requires_grad=like.requires_grad) if isinstance(like, torch.nn.Parameter) else shared
    )


class _CopySharingTensors:
    """``copy`` as ``duplicate_constant_node`` uses it, giving a tensor's copy the same memory."""

    @staticmethod
    def deepcopy(value: Any, memo: dict | None = None) -> Any:
        return alias(value, value) if isinstance(value, torch.Tensor) else copy.deepcopy(value, memo)


@contextlib.contextmanager
def partitions_share_weights(
    backend: type, seen: Callable[[list[torch.Tensor]], None] = lambda tensors: None
) -> Iterator[None]:
    """Within the block, the copy ExecuTorch makes of each partition before ``backend``
    preprocesses it, and of a constant two partitions use, share the weight tensors (XNNPACK's
    and QNN's passes rebind constants, never write into them); ``seen`` is given each copied
    partition's weights. ExecuTorch's behaviour is back afterwards."""
    own_copy = backend.__dict__.get("copy_exported_program_for_preprocess")  # None: inherited

    def copy_sharing_weights(cls: type, program: torch.export.ExportedProgram, compile_specs: list) -> Any:
        tensors = [*program.state_dict.values(), *program.constants.values()]
        seen(tensors)
        return copy.deepcopy(program, {id(t): t for t in tensors})

    backend.copy_exported_program_for_preprocess = classmethod(copy_sharing_weights)  # type: ignore[attr-defined]
    duplicate_constant_node_pass.copy = _CopySharingTensors
    try:
        yield
    finally:
        duplicate_constant_node_pass.copy = copy
        if own_copy is None:
            del backend.copy_exported_program_for_preprocess  # type: ignore[attr-defined]
        else:
            backend.copy_exported_program_for_preprocess = own_copy  # type: ignore[attr-defined]


@contextlib.contextmanager
def weights_held_once() -> Iterator[None]:
    """Within the block, XNNPACK's preprocess copies no weight tensor and the named-data store
    keeps weights as views of the program's own; ExecuTorch's behaviour is back afterwards."""
    weights = _Weights()
    add_named_data = NamedDataStore.add_named_data

    def add_as_view(self: NamedDataStore, key: str, data: Any, *args: Any, **kwargs: Any) -> None:
        add_named_data(self, key, weights.blob_for(data), *args, **kwargs)

    NamedDataStore.add_named_data = add_as_view
    try:
        with partitions_share_weights(XnnpackBackend, weights.add):
            yield
    finally:
        NamedDataStore.add_named_data = add_named_data


class EqualTensors:
    """One tensor for each distinct value met: ``one_of`` gives an earlier tensor equal to the
    one it is handed (on that tensor's memory), or remembers it -- the same weight, quantized or
    folded once per method, held once."""

    def __init__(self) -> None:
        self._met: dict[tuple, list[torch.Tensor]] = {}

    def one_of(self, tensor: torch.Tensor) -> torch.Tensor:
        met = self._met.setdefault((tensor.dtype, tuple(tensor.shape)), [])
        same = next((t for t in met if t is tensor or torch.equal(t, tensor)), None)
        if same is None:
            met.append(tensor)
            return tensor
        return tensor if same is tensor else alias(same, tensor)


def share_equal_constants(programs: Iterable[torch.export.ExportedProgram]) -> None:
    """Give each method the tensor an earlier method holds wherever their constants are equal --
    a quantized program's weights, folded into float32 once per method -- so that each is held
    once until the emitter, which stores equal constants once in the ``.pte`` anyway."""
    equal = EqualTensors()
    for program in programs:
        for table in (program.state_dict, program.constants):
            for name, tensor in list(table.items()):
                if isinstance(tensor, torch.Tensor):
                    table[name] = equal.one_of(tensor)
