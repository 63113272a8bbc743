"""What an export's graphs cost beside the graphs alive, kept down while a model is exported and
lowered: the graphs ExecuTorch's edge passes and emitter replace, freed late
(``graphs_collected_promptly``), the Python stack trace on every node
(``stack_traces_not_recorded``), and each node's whole line of ancestors (``provenance_kept_shallow``)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

import torch.fx
from torch.fx.traceback import NodeSource

from ..heap import garbage_given_back


@contextlib.contextmanager
def graphs_collected_promptly() -> Iterator[None]:
    """Within the block, the objects alive when it starts (the imported modules) are left out of
    Python's collections (``gc.freeze``); everything is collected as before after. Start it before
    any model or graph exists: an object alive at the start and dropped within is kept to the end
    (a cycle is freed only by a collection that looks at it, and none looks at a frozen object),
    which held a 3B export's converted graphs through its lowering.

    ExecuTorch's edge passes and emission retrace each method many times, each retrace leaving the
    graph it replaced behind, and a graph is a cycle (its nodes and it refer to each other) that
    only Python's cyclic collector frees. Its full collection waits until the objects that
    survived since the last one number a quarter of those it already holds, and an export's
    interpreter (torch, torchao, transformers and ExecuTorch imported) holds about 0.6 M before
    lowering starts: the graphs of several stages piled up before any was freed (at the end of the
    edge passes of a 0.5b-shaped Llama of 8 layers, 30,000 nodes were alive, about 11,000 of them
    garbage). Frozen, those 0.6 M are neither counted nor looked at."""
    garbage_given_back()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def stack_traces_not_recorded() -> Iterator[None]:
    """Within the block, torch's tracers keep no Python stack trace on the nodes they make
    (``torch.fx.config.do_not_emit_stack_traces``). Each node of an exported model keeps its own
    (its source lines: about 700 bytes of text a node of a Hugging Face Llama) through every graph
    made from it, and nothing of an export reads them: ExecuTorch's emitter writes none
    (``emit_stacktrace`` off)."""
    saved = torch.fx.config.do_not_emit_stack_traces
    torch.fx.config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        torch.fx.config.do_not_emit_stack_traces = saved


@contextlib.contextmanager
def provenance_kept_shallow() -> Iterator[None]:
    """Within the block, a node made from another records the node it came from (its
    ``from_node``), not that node's own record, which torch otherwise deep-copies into the new one:
    each retrace of an export's edge passes adds a level to every node's copy (about 2.6 KB a node
    at the end of a Llama's lowering, on the 41,000 nodes alive together at a 3B's peak). What
    reads provenance in an export -- ``torch.export``'s own renaming -- reads only the node it came
    from."""
    record = NodeSource.__init__

    def came_from(self: NodeSource, node: torch.fx.Node | None, pass_name: str = "", action: Any = None) -> None:
        record(self, None, pass_name, action)
        if node is not None:
            self.node_info = NodeSource.NodeInfo(name=node.name, target=str(node.target), graph_id=id(node.graph))

    NodeSource.__init__ = came_from  # type: ignore[method-assign]
    try:
        yield
    finally:
        NodeSource.__init__ = record  # type: ignore[method-assign]
