"""The seed flow: my_ops::mul3 on the ExampleOpPackage's ExampleCustomOp.

Define the torch op from the OpDef, bind it, quantize 8a8w with the derived annotation,
lower, run, compare with eager PyTorch.

    .venv/bin/python examples/custom_op_mul3.py --target host
    .venv/bin/python examples/custom_op_mul3.py --target qnn --soc SM8650 --device SERIAL --build-folder BUILD
"""

from __future__ import annotations

import sys

from example_flow import OP_PACKAGES, parse_args, quantize_and_run, report

import torch

import qnn_custom_ops as qco

PACKAGE_DIR = OP_PACKAGES / "ExampleOpPackage"


def main() -> int:
    args = parse_args(__doc__.splitlines()[0])
    package = qco.load_package(PACKAGE_DIR / "config" / "ExampleOpPackage.xml")
    mul3 = qco.define_torch_ops(package, "my_ops", {"ExampleCustomOp": lambda input: input * 3},
                                names={"ExampleCustomOp": "mul3"})["ExampleCustomOp"]
    binding = qco.bind(package, {"ExampleCustomOp": mul3})

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            return torch.softmax(mul3(self.conv(x)), dim=-1)

    torch.manual_seed(0)
    samples = [(torch.randn(1, 3, 16, 16),) for _ in range(8)]
    return report(quantize_and_run(args, "mul3", binding, PACKAGE_DIR, Model(), samples), ["softmax(mul3(conv(x)))"])


if __name__ == "__main__":
    sys.exit(main())
