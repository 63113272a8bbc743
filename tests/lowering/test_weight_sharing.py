"""A model of a few GB lowers only if ExecuTorch holds each weight once: what ``weights_held_once``
changes must not change the program, and ExecuTorch's own behaviour is back after it."""

from __future__ import annotations

import copy

import pytest
import torch
from executorch.backends.qualcomm.qnn_preprocess import QnnBackend
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir import to_edge_transform_and_lower
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir.backend.canonical_partitioners import duplicate_constant_node_pass

from qnn_custom_ops.atomic_files import write_atomic
from qnn_custom_ops.lowering.weight_sharing import (
    TensorBackedData,
    partitions_share_weights,
    share_equal_constants,
    weights_held_once,
)

from tests.torch_ops import TiedLm


def _lower(model: torch.nn.Module) -> tuple:
    """Two methods of one model (as prefill and decode are) lowered to XNNPACK."""
    methods = {
        name: torch.export.export(model, (torch.zeros(1, length, dtype=torch.long),))
        for name, length in (("prefill", 4), ("decode", 1))
    }
    edge = to_edge_transform_and_lower(methods, partitioner=[XnnpackPartitioner()])
    blobs = [
        blob
        for name in methods
        for _, lowered in edge.exported_program(name).graph_module.named_children()
        if hasattr(lowered, "named_data_store_output")
        for blob in lowered.named_data_store_output.buffers
    ]
    return edge.to_executorch().buffer, blobs


@pytest.mark.slow  # lowers a model to ExecuTorch twice (7-9 s)
def test_weights_held_once_writes_the_program_executorch_writes_from_the_weights_own_memory():
    model = TiedLm().eval()
    expected, _ = _lower(model)
    with weights_held_once():
        program, blobs = _lower(model)
    assert program == expected
    weights = {p.data_ptr() for p in model.parameters()}
    assert blobs and all(isinstance(b, TensorBackedData) for b in blobs), [type(b) for b in blobs]
    assert {b._tensor.data_ptr() for b in blobs} == weights  # proj and the tied head: no copies


def test_executorch_is_itself_again_after_weights_held_once():
    originals = (NamedDataStore.add_named_data, XnnpackBackend.copy_exported_program_for_preprocess)
    with pytest.raises(RuntimeError, match="inside"):
        with weights_held_once():
            assert NamedDataStore.add_named_data is not originals[0]
            raise RuntimeError("inside")
    assert NamedDataStore.add_named_data is originals[0]
    assert "copy_exported_program_for_preprocess" not in XnnpackBackend.__dict__
    assert XnnpackBackend.copy_exported_program_for_preprocess == originals[1]
    assert duplicate_constant_node_pass.copy is copy


@pytest.mark.parametrize("backend", [QnnBackend, XnnpackBackend], ids=lambda b: b.__name__)
def test_a_partition_copied_for_its_backend_holds_the_programs_own_weights_and_nothing_else_changes(backend):
    """ExecuTorch copies every partition of every method before the backend compiles the first:
    at Llama-3.1-8B's widths on QNN, 4 GB for two layers. Within ``partitions_share_weights``
    the copy's graph is its own and its weights are the program's; outside, a copy as before."""
    program = torch.export.export(TiedLm().eval(), (torch.zeros(1, 4, dtype=torch.long),))
    weights = {name: t.data_ptr() for name, t in program.state_dict.items()}
    seen: list[torch.Tensor] = []
    with pytest.raises(RuntimeError, match="inside"):
        with partitions_share_weights(backend, seen.extend):
            shared = backend.copy_exported_program_for_preprocess(program, [])
            raise RuntimeError("inside")
    assert {name: t.data_ptr() for name, t in shared.state_dict.items()} == weights
    assert shared.graph_module is not program.graph_module and shared.state_dict is not program.state_dict
    assert {t.data_ptr() for t in seen} == set(weights.values())
    assert "copy_exported_program_for_preprocess" not in backend.__dict__ and duplicate_constant_node_pass.copy is copy
    copied = backend.copy_exported_program_for_preprocess(program, [])
    assert not {t.data_ptr() for t in copied.state_dict.values()} & set(weights.values())


def test_a_program_written_piece_by_piece_is_whole_or_not_there(tmp_path):
    target = tmp_path / "model.pte"

    def fails_half_way(stream) -> None:
        stream.write(b"x" * 4096)
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_atomic(target, fails_half_way)
    assert list(tmp_path.iterdir()) == []
    write_atomic(target, lambda stream: (stream.write(b"pte "), stream.write(b"pieces")))
    assert target.read_bytes() == b"pte pieces"


def test_methods_holding_equal_constants_share_one_tensor():
    """A quantized program's weights folded once per method are equal tensors: held once."""
    model = TiedLm().eval()
    first, second = (torch.export.export(model, (torch.zeros(1, n, dtype=torch.long),)) for n in (4, 1))
    second.state_dict["proj.weight"] = torch.nn.Parameter(model.proj.weight.detach().clone(), requires_grad=False)
    second.state_dict["head.weight"] = torch.nn.Parameter(torch.zeros_like(model.head.weight), requires_grad=False)
    share_equal_constants([first, second])
    assert second.state_dict["proj.weight"].data_ptr() == first.state_dict["proj.weight"].data_ptr()
    assert isinstance(second.state_dict["proj.weight"], torch.nn.Parameter)
    assert second.state_dict["head.weight"].data_ptr() != first.state_dict["head.weight"].data_ptr()
    assert torch.equal(second.state_dict["head.weight"], torch.zeros_like(model.head.weight))
