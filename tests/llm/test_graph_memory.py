"""An export's lowering collects the graphs it discards as it goes (issue 42): the objects alive
when it starts are left out of Python's collections within, and taken in again after; an export
keeps no stack trace on its graphs' nodes."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from qnn_custom_ops.llm.graph_memory import graphs_collected_promptly, stack_traces_not_recorded


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
