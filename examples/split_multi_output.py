"""A two-output op: SplitCustomOp splits the last dimension in half, each half with its own
encoding. Same flow as custom_op_mul3.py.

    .venv/bin/python examples/split_multi_output.py --target host
"""

from __future__ import annotations

import sys

from example_flow import OP_PACKAGES, parse_args, quantize_and_run, report

import torch

import qnn_custom_ops as qco

PACKAGE_DIR = OP_PACKAGES / "SplitCustomOpPackage"


def main() -> int:
    args = parse_args(__doc__.splitlines()[0])
    package = qco.load_package(PACKAGE_DIR / "config" / "SplitCustomOpPackage.xml")
    split = qco.define_torch_ops(
        package, "my_ops", {"SplitCustomOp": lambda input: tuple(t.clone() for t in torch.chunk(input, 2, dim=-1))},
        names={"SplitCustomOp": "split_half"})["SplitCustomOp"]
    binding = qco.bind(package, {"SplitCustomOp": split})

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(16, 16)

        def forward(self, x):
            low, high = split(self.linear(x))
            return torch.relu(low), high * 4  # different ranges: two different encodings

    torch.manual_seed(0)
    samples = [(torch.randn(1, 4, 8, 16),) for _ in range(8)]
    return report(quantize_and_run(args, "split", binding, PACKAGE_DIR, Model(), samples), ["relu(low)", "high * 4"])


if __name__ == "__main__":
    sys.exit(main())
