"""torch ops defined once per test session (torch forbids defining an op twice)."""

from __future__ import annotations

import torch
from executorch.exir import EdgeCompileConfig, to_edge

import qnn_custom_ops as qco

from tests.conftest import DATA, OP_PACKAGES

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


class GatedMLP(torch.nn.Module):
    def __init__(self, act: torch.nn.Module, hidden: int = 16, inner: int = 24):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, inner, bias=False)
        self.up_proj = torch.nn.Linear(hidden, inner, bias=False)
        self.down_proj = torch.nn.Linear(inner, hidden, bias=False)
        self.act_fn = act

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Block(torch.nn.Module):
    def __init__(self, act: torch.nn.Module = torch.nn.SiLU()):
        super().__init__()
        self.norm = torch.nn.RMSNorm(16, eps=1e-5)
        self.mlp = GatedMLP(act)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class SplitModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        low, high = SPLIT(self.linear(x))
        return torch.relu(low), high * 4


class TiedLm(torch.nn.Module):
    """An embedding tied to the output projection (delegated) and a projection between them."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(64, 32)
        self.proj = torch.nn.Linear(32, 32, bias=False)
        self.head = torch.nn.Linear(32, 64, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.proj(self.embed(tokens))))


SINK = torch.ops.qco_test.kitchen_sink.default


HALVES = torch.ops.qco_test.two_halves.default


def edge_program(module: torch.nn.Module, *inputs: torch.Tensor):
    exported = torch.export.export(module, inputs)
    return to_edge(exported, compile_config=EdgeCompileConfig(_check_ir_validity=False)).exported_program()


def bound_nodes(binding, program):
    return [n for n in program.graph.nodes if binding.op_for(n) is not None]
