"""``generated_sources_dropped``: the code torch.fx generates runs, its source is not kept."""

from __future__ import annotations

import torch
from torch.fx import graph_module, symbolic_trace

from qnn_custom_ops.generated_code import generated_sources_dropped


def traced() -> torch.fx.GraphModule:
    return symbolic_trace(lambda x: torch.relu(x) * 2)


def test_code_generated_within_the_block_runs_and_keeps_no_source_and_after_it_keeps_it_again():
    sources = graph_module._loader.eval_cache
    with generated_sources_dropped():
        before = dict(sources)
        module = traced()
        module.recompile()
        assert sources == before  # none kept
    assert torch.equal(module(torch.tensor([-1.0, 3.0])), torch.tensor([0.0, 6.0]))
    traced()
    assert len(sources) > len(before)  # torch.fx's own behaviour again
