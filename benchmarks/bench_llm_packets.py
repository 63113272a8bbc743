"""Executed Hexagon packets of the LlmOpPackage's quantized kernels (UFIXED_POINT_8 and 16, HVX
on, whole call): per output element at decode shapes (one token) beside prefill shapes, and one
Llama-3.2-1B-shaped layer's custom-op packets per decode token. Counted on qemu-hexagon as
``hexagon-check`` counts them: deterministic, so they belong in the README, not in a timed test.

Each case's kernel first prepares what depends on its encodings alone (its ``<Op>Prepare``: the
gated activations' tables, prepared_cache.h), counted apart: QHPI packages do it in the HTP's
precompute hook, once per op instance when the graph is loaded. The call after it is what every
token costs; a first call with nothing prepared ahead costs both.

    .venv/bin/python -m benchmarks.bench_llm_packets      # a markdown table, then the layer
"""

from __future__ import annotations

import os

os.environ.setdefault("QNN_SDK_ROOT", "")  # never let executorch download the SDK

import qnn_custom_ops as qco  # noqa: E402
from qnn_custom_ops.llm_ops import package_dir  # noqa: E402
from qnn_custom_ops.opdef.datatypes import Datatype  # noqa: E402
from qnn_custom_ops.runtime.dtype_cases import dtype_cases  # noqa: E402
from qnn_custom_ops.runtime.hexagon import hexagon_packets  # noqa: E402

DATATYPES = (Datatype.UFIXED_POINT_8, Datatype.UFIXED_POINT_16)


def norm(op: str, rows: int, hidden: int) -> str:
    tensors = ("y", "residual_out", "x", "residual") if op == "FusedAddRmsNorm" else ("y", "x")
    return f"{op}:" + ",".join(f"{t}={rows}x{hidden}" for t in tensors) + f",weight={hidden}"


def gated(op: str, rows: int, width: int) -> str:
    return f"{op}:y={rows}x{width},x={rows}x{2 * width}"


def rope(heads: int, seq: int, head_dim: int) -> str:
    x, table = f"1x{heads}x{seq}x{head_dim}", f"{seq}x{head_dim // 2}"
    return f"Rope:y={x},x={x},cos={table},sin={table}"


#: (op, decode shapes, prefill shape): hidden 2048/3072/4096/8192, the MLP widths of Llama-3.2-1B
#: and Llama-7B, RoPE of 32 heads of 128 and Llama-3.2-1B's 32 and 8 heads of 64.
ROWS = [
    ("rms_norm", [norm("RmsNorm", 1, h) for h in (2048, 3072, 4096, 8192)], norm("RmsNorm", 64, 4096)),
    (
        "fused_add_rms_norm",
        [norm("FusedAddRmsNorm", 1, h) for h in (2048, 3072, 4096, 8192)],
        norm("FusedAddRmsNorm", 64, 4096),
    ),
    ("silu_and_mul", [gated("SiluAndMul", 1, w) for w in (8192, 11008)], gated("SiluAndMul", 64, 8192)),
    ("gelu_and_mul", [gated("GeluAndMul", 1, w) for w in (8192, 11008)], gated("GeluAndMul", 64, 8192)),
    ("rope", [rope(32, 1, 128), rope(32, 1, 64), rope(8, 1, 64)], rope(32, 64, 128)),
]
#: One decode token through a Llama-3.2-1B-shaped layer (hidden 2048, 32 query heads on 8 KV heads
#: of 64, MLP 8192): the residual add and norm before attention and before the MLP, RoPE of the
#: queries and the keys, the gated MLP's activation.
LAYER = [
    norm("FusedAddRmsNorm", 1, 2048),
    norm("FusedAddRmsNorm", 1, 2048),
    rope(32, 1, 64),
    rope(8, 1, 64),
    gated("SiluAndMul", 1, 8192),
]


def per_element(package: qco.OpPackage, specs: list[str]) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(spec, datatype) -> (packets prepared ahead, of the call, output elements)."""
    cases = dtype_cases(package, specs, 0, DATATYPES)
    packets = hexagon_packets(package_dir(), cases)
    specs_per_case = [spec for spec in specs for _ in DATATYPES]
    return {
        (spec, case.label.split()[0]): (prepared, call, sum(t.array.size for t in case.outputs))
        for spec, case, (prepared, call) in zip(specs_per_case, cases, packets)
    }


def shape(spec: str) -> str:
    return spec.split(":")[1].split(",")[1 if spec.startswith("Rope") else 0].split("=")[1]


def main() -> None:
    package = qco.load_package(*sorted((package_dir() / "config").glob("*.xml")))
    specs = [s for _, decode, prefill in ROWS for s in [*decode, prefill]]
    counts = per_element(package, sorted(set(specs + LAYER), key=specs.__add__(LAYER).index))
    names = [d.short_name for d in DATATYPES]
    print("| op | shape | phase | " + " | ".join(f"{n} packets/element, call / prepared ahead" for n in names) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in names) + " |")
    for op, decode, prefill in ROWS:
        for spec, phase in [*((s, "decode") for s in decode), (prefill, "prefill")]:
            cells = [(counts[spec, n][1] / counts[spec, n][2], counts[spec, n][0] / counts[spec, n][2]) for n in names]
            print(f"| `{op}` | {shape(spec)} | {phase} | " + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in cells) + " |")
    for n in names:
        call, prepared = (sum(counts[spec, n][i] for spec in LAYER) for i in (1, 0))
        print(f"Llama-3.2-1B-shaped layer, one decode token, {n}: {call} packets ({prepared} prepared once ahead)")


if __name__ == "__main__":
    main()
