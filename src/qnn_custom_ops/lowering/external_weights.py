"""A host program's weights in one data file beside its ``.pte`` (ExecuTorch's ``.ptd``), each
stored once.

In a ``.pte`` a tied embedding is stored twice: the embedding's gather (a portable op) reads a
program constant, the delegated ``lm_head`` an XNNPACK blob of the same bytes, and the two live
in different parts of the file. Put both in one data file and ExecuTorch's named-data store keeps
equal bytes once, under both keys. Three things send them there: the emitter's
``external_constants`` (``weights_tag``), XNNPACK's ``delegate_constant_tag`` on the weight nodes
it serializes (``tag_weights_external``), and one name per value across methods
(``name_constants_apart``), as the data file names each program constant by its fully qualified
name. While the program is emitted, each of those constants is kept as a view of its tensor, not
copied into bytes (``constants_kept_as_views``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from executorch.exir.emit._emitter import _Emitter
from executorch.exir.schema import EValue, TensorDataLocation
from executorch.exir.tensor import TensorSpec, make_tensor_value
from torch.export import ExportedProgram

from .weight_sharing import TensorBackedData

#: The tag, and so the one data file, of every weight of a program lowered with
#: ``external_weights=True``: program constants and XNNPACK's blobs alike.
WEIGHTS_TAG = "weights"


def weights_tag(node: torch.fx.Node) -> str:
    """``ExecutorchBackendConfig.external_constants``: every program constant to the data file."""
    return WEIGHTS_TAG


def tag_weights_external(program: ExportedProgram) -> None:
    """Mark the program's weights for XNNPACK to put in the data file: it reads
    ``meta["custom"]["delegate_constant_tag"]`` of the weight node it serializes, which the
    partition's copy of the graph keeps (ExecuTorch's ``delegate_external_constants_pass_unlifted``
    sets the same on an unlifted module's get_attr nodes, before export)."""
    signature = program.graph_signature
    weights = {
        *signature.inputs_to_parameters,
        *signature.inputs_to_buffers,
        *signature.inputs_to_lifted_tensor_constants,
    }
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in weights:
            node.meta.setdefault("custom", {})["delegate_constant_tag"] = WEIGHTS_TAG


def _same_value(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return (a.data_ptr() == b.data_ptr() and a.stride() == b.stride()) or torch.equal(a, b)


def name_constants_apart(programs: Mapping[str, ExportedProgram]) -> None:
    """Rename a method's constant to ``<method>.<name>`` where an earlier method holds another
    value under its name. The data file keeps one value a name, and ExecuTorch's emitter, given
    two, keeps the last without a word -- a quantized program's folded constants are numbered per
    method (``_prop_tensor_constant3`` of prefill need not be decode's)."""
    seen: dict[str, torch.Tensor] = {}
    for method, program in programs.items():
        mutated = set(program.graph_signature.buffers_to_mutate.values())
        for spec in program.graph_signature.input_specs:
            name = spec.target
            table = program.state_dict if name in program.state_dict else program.constants
            if name is None or name in mutated or not isinstance(table.get(name), torch.Tensor):
                continue
            if name in seen and not _same_value(seen[name], table[name]):
                spec.target = f"{method}.{name}"
                table[spec.target] = table.pop(name)
            seen.setdefault(spec.target, table[spec.target])


def _is_external_constant(spec: TensorSpec) -> bool:
    """A constant the emitter puts in the data file (and so plans no memory for), of its storage's size."""
    info = spec.extra_tensor_info
    return (
        spec.const
        and spec.allocated_memory != 0
        and (spec.mem_id is None or spec.mem_offset is None)
        and info is not None
        and info.fully_qualified_name is not None
        and info.location == TensorDataLocation.EXTERNAL
        and spec.storage is not None
        and spec.storage.nbytes() == spec.nbytes()
    )


@contextlib.contextmanager
def constants_kept_as_views() -> Iterator[None]:
    """Within the block, ExecuTorch's emitter keeps each constant bound for the data file as a view
    of its tensor's memory (``TensorBackedData``), hashed and deduplicated as it does, where it
    copies it into ``bytes``: an emitted program held its weights twice, which decided the peak of an
    export (Llama-3.2-1B of codes: 4.7 GiB for a 1.2 GB program). The data file is written from the
    views, byte for byte what ExecuTorch writes; its behaviour is back afterwards."""
    emit = _Emitter._tensor_spec_to_evalue

    def to_evalue(self: Any, spec: TensorSpec, constant_tag: str | None = None) -> EValue:
        if not _is_external_constant(spec):
            return emit(self, spec, constant_tag)
        storage = spec.storage
        assert storage is not None and spec.extra_tensor_info is not None  # _is_external_constant
        blob = TensorBackedData(torch.empty(0, dtype=torch.uint8).set_(storage))
        hashed = blob.sha256().hex()
        index = self.program_state.external_constant_hash.get(hashed, -1)
        if index == -1:
            index = self._save_new_const_tensor(spec, blob, hashed, None, constant_tag)
        else:
            self._save_to_external_constant_map(spec.extra_tensor_info.fully_qualified_name, index, constant_tag)
        return EValue(make_tensor_value(index, None, spec))

    _Emitter._tensor_spec_to_evalue = to_evalue
    try:
        yield
    finally:
        _Emitter._tensor_spec_to_evalue = emit
