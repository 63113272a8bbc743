"""Bytes and time per decode token, the two cache layouts of export_llm side by side.

One decoder layer of a 7B-class attention (hidden 1024, 8 query heads on 8 KV heads of 128,
float32) at several ctx_len. "scatter" (QEfficient's) returns the whole new cache: ctx_scatter
copies it and ctx_gather reads it out again; "rows" (ExecuTorch's static llama) returns only the
new row and the caller writes it in place.

Bytes: every op of the exported decode graph reads its inputs and writes its output (views
and reshapes that move nothing not counted), plus the caller's writes of the new rows. Time:
one decode call on ExecuTorch's host runtime (XNNPACK and the LlmOpPackage kernels), the
best of three.

    .venv/bin/python -m benchmarks.bench_decode_cache [--ctx 512 2048 4096]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("QNN_SDK_ROOT", "")  # never let executorch download the SDK

import torch  # noqa: E402
import transformers  # noqa: E402

import qnn_custom_ops as qco  # noqa: E402
from qnn_custom_ops.llm import export_llm  # noqa: E402
from qnn_custom_ops.llm_ops import llm_binding, package_dir  # noqa: E402
from qnn_custom_ops.runtime import HostRunner  # noqa: E402

VIEWS = {"view", "reshape", "transpose", "unsqueeze", "expand", "permute", "slice", "select", "clone",
         "alias", "_unsafe_view", "contiguous", "t"}
CALLS = 12


def graph_bytes(program: torch.export.ExportedProgram) -> int:
    """What the graph's ops read and write: each non-view op's tensor inputs and outputs."""
    total = 0
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target.__name__.split(".")[0] in VIEWS:
            continue
        tensors = [a.meta["val"] for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
        out = node.meta.get("val")
        tensors += list(out) if isinstance(out, (tuple, list)) else [out]
        total += sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    return total


def model() -> torch.nn.Module:
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=1024, intermediate_size=256, num_hidden_layers=1,
                                      num_attention_heads=8, num_key_value_heads=8, head_dim=128)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def decode_call_seconds(runner: HostRunner, module: torch.nn.Module, inputs: tuple) -> float:
    """Seconds of one decode call: a run of CALLS calls minus a run of one (each run loads the
    program once), best of three."""
    program = qco.lower(module, inputs, llm_binding(), target="host")

    def run(calls: int) -> float:
        start = time.perf_counter()
        runner.run(program.buffer, [inputs] * calls)
        return time.perf_counter() - start

    return min(run(CALLS) - run(1) for _ in range(3)) / (CALLS - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ctx", type=int, nargs="+", default=[512, 2048, 4096])
    args = parser.parse_args()
    runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
    print(f"{'ctx_len':>8} {'cache MB':>9} | {'scatter MB':>10} {'rows MB':>8} {'ratio':>6} | "
          f"{'scatter ms':>10} {'rows ms':>8} {'ratio':>6}")
    for ctx_len in args.ctx:
        measured = {}
        for layout in ("scatter", "rows"):
            programs = export_llm(model(), prefill_len=1, ctx_len=ctx_len, cache=layout)
            decode = programs.decode
            written = 0 if layout == "scatter" else sum(t.numel() * 4 for t in decode.module(*decode.example_inputs)[1:])
            measured[layout] = (graph_bytes(decode.exported) + written,
                                decode_call_seconds(runner, decode.module, decode.example_inputs))
        cache = sum(t.numel() * 4 for t in decode.example_inputs[2:])
        (sb, st), (rb, rt) = measured["scatter"], measured["rows"]
        print(f"{ctx_len:>8} {cache / 1e6:>9.1f} | {sb / 1e6:>10.1f} {rb / 1e6:>8.1f} {sb / rb:>5.1f}x | "
              f"{st * 1e3:>10.2f} {rt * 1e3:>8.2f} {st / rt:>5.1f}x")


if __name__ == "__main__":
    main()
