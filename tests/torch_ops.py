"""torch ops defined once per test session (torch forbids defining an op twice)."""

from __future__ import annotations

import torch

import qnn_custom_ops as qco

from .conftest import DATA, OP_PACKAGES

LIBRARY = torch.library.Library("qco_test", "FRAGMENT")
LIBRARY.define("kitchen_sink(Tensor x, Tensor? bias, int shift, bool flag, float[] scales, float alpha=0.5, "
               "str mode=\"rms\", int[] sizes=[1, 2], *, int axis=-1) -> Tensor")
LIBRARY.define("two_halves(Tensor x) -> (Tensor, Tensor)")


@torch.library.impl(LIBRARY, "kitchen_sink", "CompositeExplicitAutograd")
def kitchen_sink(x, bias, shift, flag, scales, alpha=0.5, mode="rms", sizes=(1, 2), *, axis=-1):
    y = x * alpha + shift
    return y + bias if bias is not None else y


@torch.library.register_fake("qco_test::kitchen_sink", lib=LIBRARY)
def _kitchen_sink_fake(x, bias, shift, flag, scales, alpha=0.5, mode="rms", sizes=(1, 2), *, axis=-1):
    return torch.empty_like(x)


@torch.library.impl(LIBRARY, "two_halves", "CompositeExplicitAutograd")
def two_halves(x):
    first, second = torch.chunk(x, 2, dim=-1)
    return first.clone(), second.clone()


@torch.library.register_fake("qco_test::two_halves", lib=LIBRARY)
def _two_halves_fake(x):
    shape = (*x.shape[:-1], x.shape[-1] // 2)
    return x.new_empty(shape), x.new_empty(shape)


for _overload in (torch.ops.qco_test.kitchen_sink.default, torch.ops.qco_test.two_halves.default):
    qco.register_out_variant(_overload)

ARG_KIND_PACKAGE = qco.load_package(DATA / "every_arg_kind.xml")
EXAMPLE_PACKAGE = qco.load_package(OP_PACKAGES / "ExampleOpPackage/config/ExampleOpPackage.xml")
SPLIT_PACKAGE = qco.load_package(OP_PACKAGES / "SplitCustomOpPackage/config/SplitCustomOpPackage.xml")

MUL3 = qco.define_torch_ops(EXAMPLE_PACKAGE, "my_ops", {"ExampleCustomOp": lambda input: input * 3},
                            names={"ExampleCustomOp": "mul3"})["ExampleCustomOp"]
SPLIT = qco.define_torch_ops(SPLIT_PACKAGE, "my_ops",
                             {"SplitCustomOp": lambda input: tuple(t.clone() for t in torch.chunk(input, 2, -1))},
                             names={"SplitCustomOp": "split_half"})["SplitCustomOp"]

QUANT_PACKAGE = qco.load_package(DATA / "quant_ops.xml")
QUANT_OPS = qco.define_torch_ops(QUANT_PACKAGE, "qco_quant", {
    "FloatOnly": lambda x: torch.tanh(x) * 2,
    "GatherRows": lambda table, indices: table.index_select(0, indices),
    "ScaleRows": lambda x, weight: x * weight,
    "Halves": lambda x: tuple(t.clone() for t in torch.chunk(x, 2, -1)),
})


class ConvMul3(torch.nn.Module):
    """conv -> my_ops::mul3 -> softmax: the seed model of the tests."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.softmax(MUL3(self.conv(x)), dim=-1)


def pt2e_quantize(model, samples, binding, quant_dtype="8a8w", overrides=None):
    """PT2E with QnnQuantizer and our annotation: export, prepare, calibrate on ``samples``, convert."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(torch.export.export(model, samples[0]).module(),
                            qco.make_quantizer(binding, quant_dtype, overrides))
    for sample in samples:
        prepared(*sample)
    return convert_pt2e(prepared)
