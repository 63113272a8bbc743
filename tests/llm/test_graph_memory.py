"""An export's lowering collects the graphs it discards as it goes (issue 42): the objects alive
when it starts are left out of Python's collections within, and taken in again after; an export
keeps no stack trace on its graphs' nodes, and a node records the node it came from but not that
node's ancestors."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from executorch.exir import EdgeProgramManager, to_edge

from qnn_custom_ops.llm.checkpoint import export_checkpoint
from qnn_custom_ops.llm.graph_memory import (
    graphs_collected_promptly,
    provenance_kept_shallow,
    stack_traces_not_recorded,
)


class _Node:
    """A cycle, as a graph and its nodes are."""

    def __init__(self) -> None:
        self.other: _Node = self


def test_objects_alive_before_are_frozen_within_and_not_after() -> None:
    frozen = gc.get_freeze_count()
    alive = _Node()
    with graphs_collected_promptly():
        assert gc.get_freeze_count() > frozen
        assert not any(o is alive for o in gc.get_objects())  # frozen: no collection looks at it
    assert gc.get_freeze_count() == frozen
    assert any(o is alive for o in gc.get_objects())


def test_a_cycle_discarded_within_is_collected() -> None:
    with graphs_collected_promptly():
        dropped = _Node()
        gone = weakref.ref(dropped)
        del dropped
        gc.collect()
        assert gone() is None


def test_collections_are_back_after_a_failure() -> None:
    frozen = gc.get_freeze_count()
    with pytest.raises(RuntimeError), graphs_collected_promptly():
        raise RuntimeError("lowering failed")
    assert gc.get_freeze_count() == frozen


def _traced_nodes() -> list[torch.fx.Node]:
    program = torch.export.export(torch.nn.Linear(4, 2), (torch.zeros(1, 4),))
    return [n for n in program.graph.nodes if n.op == "call_function"]


def test_no_stack_trace_on_nodes_traced_within() -> None:
    assert all(n.meta.get("stack_trace") for n in _traced_nodes())
    with stack_traces_not_recorded():
        assert not any(n.meta.get("stack_trace") for n in _traced_nodes())
    assert all(n.meta.get("stack_trace") for n in _traced_nodes())


def _depth(sources: list) -> int:
    """How many generations of ancestors a node's ``from_node`` records."""
    return 1 + max(_depth(s.from_node) for s in sources) if sources else 0


def _edge_provenance() -> list[tuple[int, str]]:
    """Each edge node's provenance: its depth and the ATen node it was made from."""
    program = torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.SiLU()), (torch.zeros(1, 4),))
    nodes = [n for n in to_edge(program).exported_program().graph.nodes if n.op == "call_function"]
    return [(_depth(n.meta["from_node"]), n.meta["from_node"][-1].name) for n in nodes]


def test_an_edge_node_records_its_aten_node_and_no_older_ancestor_within() -> None:
    assert min(depth for depth, _ in _edge_provenance()) > 1
    with provenance_kept_shallow():
        within = _edge_provenance()
    assert {depth for depth, _ in within} == {1}
    assert {name for _, name in within} == {name for _, name in _edge_provenance()} == {"linear", "silu"}


@pytest.mark.slow  # a quantized export of the tiny checkpoint (seconds)
def test_an_export_emits_its_program_with_its_converted_graphs_collected(checkpoint, tmp_path, monkeypatch):
    """The converted programs ``llm export`` hands to lowering are freed before emission, where an
    export peaks: Python's collections skip what was alive when they were frozen, so they are
    frozen before the export makes any graph."""
    import qnn_custom_ops.lowering.program as lowering

    lower, emit = lowering.lower_methods, EdgeProgramManager.to_executorch
    converted: list[weakref.ref] = []
    alive_at_emission: list[list[bool]] = []

    def lower_methods(methods, *args, **kwargs):
        converted.extend(weakref.ref(module) for module, _ in methods.values())
        return lower(methods, *args, **kwargs)

    def to_executorch(self, *args, **kwargs):
        alive_at_emission.append([module() is not None for module in converted])
        return emit(self, *args, **kwargs)

    monkeypatch.setattr(lowering, "lower_methods", lower_methods)
    monkeypatch.setattr(EdgeProgramManager, "to_executorch", to_executorch)
    export_checkpoint(checkpoint, tmp_path / "export", prefill_len=8, ctx_len=64, quant="16a4w")
    assert alive_at_emission == [[False, False]]
