"""A large model's lowering says how far it is: each partition XNNPACK compiles is counted, with
the time left at the pace so far, and XNNPACK is as it was afterwards."""

from __future__ import annotations

import re

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir import to_edge_transform_and_lower

from qnn_custom_ops.lowering.lowering_progress import partitions_reported


class Split(torch.nn.Module):
    """Two projections XNNPACK takes, split by a cumsum it does not: two partitions."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(8, 8)
        self.second = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.cumsum(self.first(x), dim=-1))


def delegates(edge: object, method: str) -> int:
    graph = edge.exported_program(method).graph  # type: ignore[attr-defined]
    return sum(node.target is torch.ops.higher_order.executorch_call_delegate for node in graph.nodes)


@pytest.mark.slow  # a quantization or lowering (seconds): kept out of the fast tier's 40 s
def test_each_compiled_partition_is_counted_with_the_time_left_and_xnnpack_is_restored():
    methods = {
        name: torch.export.export(Split(), (torch.randn(rows, 8),)) for name, rows in (("prefill", 4), ("decode", 1))
    }
    own = (XnnpackBackend.__dict__["preprocess"], "preprocess_multimethod" in XnnpackBackend.__dict__)
    said: list[str] = []
    with partitions_reported(said.append):
        edge = to_edge_transform_and_lower(methods, partitioner={n: [XnnpackPartitioner()] for n in methods})
    total = sum(delegates(edge, method) for method in methods)
    assert total == 4
    assert re.fullmatch(r"lowering: 1 of 4 partitions compiled by XNNPACK, about \d+ s left", said[0]), said
    assert said[-1] == "lowering: 4 of 4 partitions compiled by XNNPACK", said
    counts = [int(line.split()[1]) for line in said]
    assert counts == sorted(set(counts)), said
    assert (XnnpackBackend.__dict__["preprocess"], "preprocess_multimethod" in XnnpackBackend.__dict__) == own
