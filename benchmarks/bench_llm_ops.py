"""The LLM ops on one pinned core: the host kernel (C ABI) beside torch eager and the op's
decomposed graph lowered to XNNPACK on ExecuTorch, with the copy bandwidth of the same run.

Targets (prefill shapes, memory-bound): kernel >= 80 % of copy bandwidth, >= 1.0x torch eager,
>= 1.5x the decomposed graph on XNNPACK. Decode shapes (one token) are printed for the record:
they are call-overhead bound.

    .venv/bin/python benchmarks/bench_llm_ops.py           # a table
    .venv/bin/python benchmarks/bench_llm_ops.py --json    # one JSON record per op and shape
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("QNN_SDK_ROOT", "")  # never let executorch download the SDK

from qnn_custom_ops.quiet import native_noise_filtered, quiet_third_party  # noqa: E402

quiet_third_party(verbose=False)

import torch  # noqa: E402
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # noqa: E402
from executorch.exir import to_edge_transform_and_lower  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

from qnn_custom_ops.library import package_dir  # noqa: E402
from qnn_custom_ops.library import reference as ref  # noqa: E402
from qnn_custom_ops.library.cases import LlmCase, llm_cases  # noqa: E402
from qnn_custom_ops.runtime import KernelLibrary, build_host_kernels  # noqa: E402
from qnn_custom_ops.runtime.cost import copy_bandwidth, measure, one_core, seconds_per_call  # noqa: E402

TARGET_BANDWIDTH, TARGET_EAGER, TARGET_XNNPACK = 0.80, 1.0, 1.5


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
    args = parser.parse_args()
    with native_noise_filtered(verbose=False):  # XNNPACK's cpuinfo lines
        bandwidth, rows = records(args.min_seconds)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return
    print(f"one core (cpu {rows[0]['core']}), copy bandwidth {bandwidth / 1e9:.2f} GB/s")
    print(f"{'op':<13}{'shape':<34}{'kernel':>10}{'GB/s':>7}{'of copy':>8}{'x eager':>8}{'x xnnpack':>10}  missed")
    for row in rows:
        print(f"{row['op']:<13}{row['shape']:<34}{row['kernel_s'] * 1e3:>8.3f}ms{row['kernel_gbps']:>7.2f}"
              f"{row['kernel_gbps'] / row['copy_gbps']:>8.0%}{row['eager_s'] / row['kernel_s']:>8.2f}"
              f"{row['xnnpack_s'] / row['kernel_s']:>10.2f}  {'; '.join(verdicts(row)) or '-'}")


if __name__ == "__main__":
    main()
