"""Demo: validate and (re)generate the shipped ExampleOpPackage, build its kernel for the
host and check it against PyTorch, float32 and uint8.

    .venv/bin/python examples/kernel_demo.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import qnn_custom_ops as qco
from qnn_custom_ops.generator import generate
from qnn_custom_ops.runtime import KernelDType, KernelLibrary, KernelTensor, build_host_kernels

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "op_packages" / "ExampleOpPackage"


def main() -> int:
    package = qco.load_package(PACKAGE_DIR / "config" / "ExampleOpPackage.xml")
    print(f"validated {package.name}: ops {', '.join(package.ops)}")

    plan = generate(package, PACKAGE_DIR.parent, dry_run=True)
    for step in plan.steps:
        if step.action.value != "unchanged":
            print(f"  {step}")
    print(f"  {plan.summary()}")

    library = KernelLibrary(build_host_kernels(PACKAGE_DIR), package.name)
    print(f"built {library.path}")

    x = torch.randn(1, 8, 8, 16, generator=torch.Generator().manual_seed(0))
    out = KernelTensor.empty(x.shape, KernelDType.Float32)
    library.run("ExampleCustomOp", [out], [KernelTensor(x.numpy(), KernelDType.Float32)])
    float_error = (torch.from_numpy(out.array) - 3 * x).abs().max().item()

    scale, offset = float(x.abs().max()) / 127.5, -128
    q = torch.clamp(torch.round(x / scale) - offset, 0, 255).to(torch.uint8)
    out_scale = 3 * scale
    q_out = KernelTensor.empty(x.shape, KernelDType.UFixed8, out_scale, offset)
    library.run("ExampleCustomOp", [q_out], [KernelTensor(q.numpy(), KernelDType.UFixed8, scale, offset)])
    dequantized = out_scale * (torch.from_numpy(q_out.array).float() + offset)
    quant_error = (dequantized - 3 * x).abs().max().item()

    print(f"mul3 float32: max |kernel - torch| = {float_error:.3g}")
    print(f"mul3 uint8:   max |dequant(kernel) - torch| = {quant_error:.3g} (one step = {out_scale:.3g})")
    ok = float_error == 0.0 and quant_error <= out_scale
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
