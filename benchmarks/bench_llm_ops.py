"""The LLM ops on one pinned core: the host kernel (C ABI) beside torch eager and the op's
decomposed graph lowered to XNNPACK on ExecuTorch, with the copy bandwidth of the same run.

Targets (prefill shapes, memory-bound): kernel >= 80 % of copy bandwidth, >= 1.0x torch eager,
>= 1.5x the decomposed graph on XNNPACK. Decode shapes (one token) are printed for the record:
they are call-overhead bound.

The quantized kernels (8a8w, 16a16w) are timed on the same prefill shapes with calibrated
encodings, beside the same kernels built from another git revision (``--baseline REV``: the
package as committed there), with each one's SQNR against the float reference.

    .venv/bin/python -m benchmarks.bench_llm_ops                    # a table
    .venv/bin/python -m benchmarks.bench_llm_ops --json             # one JSON record per op and shape
    .venv/bin/python -m benchmarks.bench_llm_ops --baseline HEAD~3  # quantized: now vs HEAD~3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

os.environ.setdefault("QNN_SDK_ROOT", "")  # never let executorch download the SDK

from qnn_custom_ops.quiet import native_noise_filtered, quiet_third_party  # noqa: E402

quiet_third_party(verbose=False)

import torch  # noqa: E402
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # noqa: E402
from executorch.exir import to_edge_transform_and_lower  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

import numpy as np  # noqa: E402

from qnn_custom_ops.llm_ops import package_dir  # noqa: E402
from qnn_custom_ops.llm_ops.ops import OPS_BY_NAME  # noqa: E402
from qnn_custom_ops.llm_ops import reference as ref  # noqa: E402
from qnn_custom_ops.llm_ops.cost_cases import LlmCase, llm_cases  # noqa: E402
from qnn_custom_ops.runtime import KernelDType, KernelLibrary, KernelTensor, build_host_kernels  # noqa: E402
from qnn_custom_ops.runtime.cost import KernelCase, copy_bandwidth, measure, one_core, seconds_per_call  # noqa: E402

TARGET_BANDWIDTH, TARGET_EAGER, TARGET_XNNPACK = 0.80, 1.0, 1.5
REPO = Path(__file__).resolve().parents[1]


class Decomposed(torch.nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, *args):
        return self.function(*args)


def xnnpack_seconds(case: LlmCase) -> float:
    """The op's decomposed graph exported, lowered with the XNNPACK partitioner (what it does
    not take runs on the portable kernels), executed by the ExecuTorch runtime."""
    exported = torch.export.export(Decomposed(case.decomposed), case.args)
    program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    inputs = list(case.args)
    (result,) = method.execute(inputs)
    torch.testing.assert_close(result, getattr(ref, case.op)(*case.args))
    return seconds_per_call(lambda: method.execute(inputs))


def records(min_seconds: float) -> tuple[float, list[dict]]:
    library = KernelLibrary(build_host_kernels(package_dir()), "LlmOpPackage")
    torch.set_num_threads(1)
    with one_core() as core:
        return measure_all(library, core, min_seconds)


def measure_all(library: KernelLibrary, core: int, min_seconds: float) -> tuple[float, list[dict]]:
    bandwidth = copy_bandwidth()
    rows = []
    for case in llm_cases():
        kernel_case = case.kernel_case()
        (cost,) = measure(library, [kernel_case], min_seconds)
        torch.testing.assert_close(torch.from_numpy(kernel_case.outputs[0].array), getattr(ref, case.op)(*case.args),
                                   rtol=1e-5, atol=1e-5)  # a fast wrong kernel is no result
        eager = seconds_per_call(lambda: getattr(ref, case.op)(*case.args), min_seconds)
        rows.append({
            "op": case.op, "phase": case.phase, "shape": case.label.split(" ", 1)[1], "dtype": "float32",
            "kernel_s": cost.seconds, "eager_s": eager, "xnnpack_s": xnnpack_seconds(case),
            "bytes": cost.nbytes, "kernel_gbps": cost.bandwidth / 1e9, "copy_gbps": bandwidth / 1e9, "core": core,
        })
    return bandwidth, rows


#: Codes of each quantized dtype: numpy type, lowest and highest code.
CODES = {KernelDType.UFixed8: (np.uint8, 0, 255), KernelDType.UFixed16: (np.uint16, 0, 65535),
         KernelDType.SFixed8: (np.int8, -127, 127), KernelDType.SFixed16: (np.int16, -32767, 32767)}
#: quant_dtype: (activations, static weights), as make_quantizer encodes them.
QUANT_DTYPES = {"8a8w": (KernelDType.UFixed8, KernelDType.SFixed8), "16a16w": (KernelDType.UFixed16, KernelDType.SFixed16)}
QUANTIZED_OPS = ("rms_norm", "silu_and_mul", "gelu_and_mul", "rope")
STATIC_INPUTS = {"rms_norm": {1}}  # per op, the inputs a model holds as weights


def quantized(real: torch.Tensor, dtype: KernelDType) -> KernelTensor:
    """``real`` in codes of ``dtype``, encoded over its range as PT2E's min/max observers do
    (zero inside the range; signed codes symmetric)."""
    numpy_type, low, high = CODES[dtype]
    if low < 0:
        scale, offset = float(real.abs().max()) / high, 0
    else:
        lo, hi = min(float(real.min()), 0.0), max(float(real.max()), 0.0)
        scale = (hi - lo) / high
        offset = -round(-lo / scale)
    codes = (torch.round(real / scale) - offset).clamp(low, high)
    return KernelTensor(codes.numpy().astype(numpy_type), dtype, scale, offset)


def dequantized(tensor: KernelTensor) -> torch.Tensor:
    return tensor.scale * (torch.from_numpy(tensor.array.astype(np.float64)) + tensor.offset)


def sqnr_db(got: torch.Tensor, want: torch.Tensor) -> float:
    noise = float(((got - want.double()) ** 2).sum())
    return float("inf") if noise == 0 else 10 * np.log10(float((want.double() ** 2).sum()) / noise)


def quantized_case(case: LlmCase, quant_dtype: str) -> tuple[KernelCase, torch.Tensor]:
    """The prefill case in codes (weights in the weight encoding), and its float reference."""
    activation, weight = QUANT_DTYPES[quant_dtype]
    static = STATIC_INPUTS.get(case.op, set())
    inputs = tuple(quantized(a, weight if i in static else activation) for i, a in enumerate(case.args))
    expected = getattr(ref, case.op)(*case.args)
    out = quantized(expected, activation)
    out.array[...] = 0
    return KernelCase(OPS_BY_NAME[case.op].qnn_type, f"{quant_dtype} {case.label}", (out,), inputs), expected


def package_at(revision: str, into: Path) -> Path:
    """The LlmOpPackage as committed at ``revision``, extracted under ``into``."""
    relative = Path("op_packages") / package_dir().name  # package_dir() may be a link into the checkout
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, str(relative)], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / relative


def quantized_rows(libraries: dict[str, KernelLibrary], min_seconds: float) -> list[dict]:
    """Seconds per call and SQNR against float of each library's quantized kernels."""
    rows = []
    for case in llm_cases():
        if case.phase != "prefill" or case.op not in QUANTIZED_OPS:
            continue
        for quant_dtype in QUANT_DTYPES:
            kernel_case, expected = quantized_case(case, quant_dtype)
            row = {"op": case.op, "shape": case.label.split(" ", 1)[1], "dtype": quant_dtype}
            for name, library in libraries.items():
                (cost,) = measure(library, [kernel_case], min_seconds)
                row[f"{name}_s"] = cost.seconds
                row[f"{name}_sqnr_db"] = sqnr_db(dequantized(kernel_case.outputs[0]), expected)
            rows.append(row)
    return rows


def quantized_records(baseline: str | None, min_seconds: float) -> list[dict]:
    with tempfile.TemporaryDirectory() as scratch:
        libraries = {"kernel": KernelLibrary(build_host_kernels(package_dir()), "LlmOpPackage")}
        if baseline:
            libraries["baseline"] = KernelLibrary(build_host_kernels(package_at(baseline, Path(scratch))), "LlmOpPackage")
        with one_core():
            return quantized_rows(libraries, min_seconds)


def print_quantized(rows: list[dict], baseline: str | None) -> None:
    against = f"{'baseline':>10}{'x baseline':>11}{'SQNR base':>10}" if baseline else ""
    print(f"\nquantized{f' (baseline: {baseline})' if baseline else ''}")
    print(f"{'op':<13}{'dtype':<7}{'shape':<28}{'kernel':>10}{'SQNR dB':>9}{against}")
    for row in rows:
        line = f"{row['op']:<13}{row['dtype']:<7}{row['shape']:<28}{row['kernel_s'] * 1e3:>8.2f}ms" \
               f"{row['kernel_sqnr_db']:>9.2f}"
        if baseline:
            line += f"{row['baseline_s'] * 1e3:>8.2f}ms{row['baseline_s'] / row['kernel_s']:>11.2f}" \
                    f"{row['baseline_sqnr_db']:>10.2f}"
        print(line)


def verdicts(row: dict) -> list[str]:
    """Each target the row misses, with by how much."""
    if row["phase"] != "prefill":
        return []
    checks = [("bandwidth", row["kernel_gbps"] / row["copy_gbps"], TARGET_BANDWIDTH),
              ("vs eager", row["eager_s"] / row["kernel_s"], TARGET_EAGER),
              ("vs xnnpack", row["xnnpack_s"] / row["kernel_s"], TARGET_XNNPACK)]
    return [f"{name} {value:.2f} < {target:.2f}" for name, value, target in checks if value < target]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON record per op and shape")
    parser.add_argument("--min-seconds", type=float, default=0.2, help="length of each timing round")
    parser.add_argument("--baseline", metavar="REV", help="also time the quantized kernels as committed at REV")
    parser.add_argument("--quantized-only", action="store_true", help="only the quantized table")
    args = parser.parse_args()
    quantized_table = quantized_records(args.baseline, args.min_seconds)
    if args.quantized_only:
        rows = []
    else:
        with native_noise_filtered(verbose=False):  # XNNPACK's cpuinfo lines
            bandwidth, rows = records(args.min_seconds)
    if args.json:
        for row in rows + quantized_table:
            print(json.dumps(row))
        return
    if args.quantized_only:
        print_quantized(quantized_table, args.baseline)
        return
    print(f"one core (cpu {rows[0]['core']}), copy bandwidth {bandwidth / 1e9:.2f} GB/s")
    print(f"{'op':<13}{'shape':<34}{'kernel':>10}{'GB/s':>7}{'of copy':>8}{'x eager':>8}{'x xnnpack':>10}  missed")
    for row in rows:
        print(f"{row['op']:<13}{row['shape']:<34}{row['kernel_s'] * 1e3:>8.3f}ms{row['kernel_gbps']:>7.2f}"
              f"{row['kernel_gbps'] / row['copy_gbps']:>8.0%}{row['eager_s'] / row['kernel_s']:>8.2f}"
              f"{row['xnnpack_s'] / row['kernel_s']:>10.2f}  {'; '.join(verdicts(row)) or '-'}")
    print_quantized(quantized_table, args.baseline)


if __name__ == "__main__":
    main()
