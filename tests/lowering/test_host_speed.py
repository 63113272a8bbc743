"""The host speed kernels compute the bits of the ExecuTorch kernels they stand in for.

Real programs (torch.export, to_edge, ``UseHostSpeedKernels``) on the real ExecuTorch runtime.
``mm``, ``bmm``: ExecuTorch's own gemm sums each output over k in order from 0, every product rounded
before it is added; the reference here computes exactly that with torch's elementwise float32
ops. (A process that imported ``executorch.kernels.quantized`` may route ExecuTorch's ``mm`` to
torch's BLAS instead, whose order differs: the speed kernel does not depend on what is loaded.)
``quantize_per_tensor``: against ExecuTorch's own kernel, on ties, NaN and values far out of range.
"""

from __future__ import annotations

import pytest
import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

import qnn_custom_ops.lowering.host_speed  # noqa: F401  (the qco_host ops)
from qnn_custom_ops.lowering.host_speed import LayoutOnCodes, UseHostSpeedKernels
from qnn_custom_ops.runtime import HostRunner
from qnn_custom_ops.runtime.loading import program_operators

#: Each test lowers a program or two (2-3 s), and the first builds the speed kernels.
pytestmark = pytest.mark.slow

#: (m, k, n) of the mm cases: a prefill's, an lm_head's, a decode step's, a decode step's with a
#: column tail, row and column tails, a short k.
MM_SHAPES = [(32, 128, 128), (32, 128, 1024), (1, 384, 128), (1, 128, 200), (13, 40, 37), (9, 7, 16)]
#: (batch, m, k, n) of the bmm cases: attention's, a decode step's, tails.
BMM_SHAPES = [(2, 64, 32, 96), (2, 1, 32, 160), (3, 5, 7, 20)]
#: (shape, dims, dtype) of the permute cases: heads, the last dimension moved, rank 3, bytes.
PERMUTES = [((1, 32, 4, 32), (0, 2, 1, 3), torch.float32), ((1, 2, 32, 32), (0, 1, 3, 2), torch.int32),
            ((3, 5, 7), (2, 0, 1), torch.int16), ((6, 4), (1, 0), torch.uint8)]
#: (quant_min, quant_max, dtype, zero_point) of the quantize cases: uint8, int8, int16, uint16 in int32.
ENCODINGS = [(0, 255, torch.uint8, 128), (-128, 127, torch.int8, 0), (-32767, 32767, torch.int16, 0),
             (0, 65535, torch.int32, 30870)]


class Products(torch.nn.Module):
    """Every mm case, then every bmm case, on pairs of inputs."""

    def forward(self, *pairs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        products = zip(pairs[::2], pairs[1::2])
        return tuple(torch.mm(x, w) if x.dim() == 2 else torch.bmm(x, w) for x, w in products)


class Weighted(torch.nn.Module):
    """Inputs times constant weights (a folded program's products): mm of a constant, as panels."""

    def __init__(self, weights: list[torch.Tensor]) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList(weights)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(torch.mm(x, w) for x, w in zip(inputs, self.weights))


class Permutes(torch.nn.Module):
    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(x.permute(dims) + 0 for x, (_, dims, _) in zip(inputs, PERMUTES))  # + 0: permute_copy


class Requantized(torch.nn.Module):
    """Codes dequantized, moved (a permute and a view) and quantized again with their encoding,
    as PT2E leaves every layout op between two quantized ops; once with another encoding, and
    once as the program's output."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        encoding = (0.0117, 30870, 0, 65535, torch.int32)
        codes = torch.ops.quantized_decomposed.quantize_per_tensor(x, *encoding)

        def moved() -> torch.Tensor:
            return torch.ops.quantized_decomposed.dequantize_per_tensor(codes, *encoding).permute(0, 2, 1, 3)

        same = torch.ops.quantized_decomposed.quantize_per_tensor(moved().reshape(1, 8, -1), *encoding)
        other = torch.ops.quantized_decomposed.quantize_per_tensor(moved(), 0.02, 30000, 0, 65535, torch.int32)
        kept = torch.ops.quantized_decomposed.quantize_per_tensor(moved().reshape(1, 8, -1), *encoding)
        return same + 1, other, kept


#: (shape, size, dtype) of the expand cases: grouped-query attention's heads repeated, a new
#: leading dimension with -1, every dimension repeated, bytes.
EXPANDS = [((1, 2, 1, 96, 32), (1, 2, 2, 96, 32), torch.float32), ((2, 1, 3), (4, 2, -1, 3), torch.int32),
           ((1, 1), (3, 5), torch.int16), ((5, 1, 4), (5, 3, 4), torch.uint8)]


class Expands(torch.nn.Module):
    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(x.expand(size) + 0 for x, (_, size, _) in zip(inputs, EXPANDS))  # + 0: expand_copy


#: (shape, shape) of the add cases: attention's scores and mask, equal shapes, a row added to
#: each row, a column and a row to a matrix.
ADDS = [((1, 2, 64, 128), (1, 1, 64, 128)), ((2, 3), (2, 3)), ((3, 4, 5), (5,)), ((4, 1), (1, 5))]


class Adds(torch.nn.Module):
    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(x + y for x, y in zip(inputs[::2], inputs[1::2]))


class Softmaxes(torch.nn.Module):
    """Softmax over the last dimension (attention's rows) and over dimension 1 (strided)."""

    def forward(self, rows: torch.Tensor, columns: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.softmax(rows, -1), torch.softmax(columns, 1)


class Quantizes(torch.nn.Module):
    """``x`` quantized in each encoding of ``encodings`` (scale 0.0117)."""

    def __init__(self, encodings: list[tuple]) -> None:
        super().__init__()
        self.encodings = encodings

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(
            torch.ops.quantized_decomposed.quantize_per_tensor(x, 0.0117, zero_point, low, high, dtype)
            for low, high, dtype, zero_point in self.encodings
        )


def program(module: torch.nn.Module, inputs: tuple, speed: bool, passes: tuple = (UseHostSpeedKernels,)) -> bytes:
    """``module`` on ExecuTorch's kernels, or (``speed``) after ``passes``."""
    import executorch.kernels.quantized  # noqa: F401  (quantize's out variant)

    edge = to_edge_transform_and_lower(
        torch.export.export(module, inputs),
        transform_passes=[p() for p in passes] if speed else [],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    return edge.to_executorch().buffer


def sequential_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Each output summed over k in order from 0, every product rounded, then added
    (``[..., m, k] @ [..., k, n]``)."""
    out = torch.zeros(*x.shape[:-1], w.shape[-1])
    for i in range(x.shape[-1]):
        out = out + x[..., i : i + 1] * w[..., i : i + 1, :]
    return out


def test_mm_and_bmm_sum_in_order_without_fma():
    shapes = [((m, k), (k, n)) for m, k, n in MM_SHAPES] + [((b, m, k), (b, k, n)) for b, m, k, n in BMM_SHAPES]
    pairs = [(torch.randn(a), torch.randn(b)) for a, b in shapes]
    inputs = tuple(t for pair in pairs for t in pair)
    pte = program(Products(), inputs, speed=True)
    assert {"qco_host::mm.out", "qco_host::bmm.out"} <= program_operators(pte)
    assert not {"aten::mm.out", "aten::bmm.out"} & program_operators(pte)
    outputs = HostRunner().run(pte, [inputs])[0]
    for (x, w), out in zip(pairs, outputs):
        assert torch.equal(out, sequential_mm(x, w)), f"{tuple(x.shape)} @ {tuple(w.shape)}"


def test_products_of_constant_weights_read_panels_and_sum_in_order():
    """A prefill's rows (whole tiles), a decode step's one row, rows short of a tile; a weight of
    columns that are not whole panels stays a plain mm."""
    shapes = [(32, 128, 768), (1, 128, 64), (13, 40, 32), (3, 16, 20)]
    weights = [torch.randn(k, n) for _, k, n in shapes]
    inputs = tuple(torch.randn(m, k) for m, k, _ in shapes)
    pte = program(Weighted(weights), inputs, speed=True)
    assert [op for op in ops(pte) if "mm" in op] == ["qco_host::mm_panels.out"] * 3 + ["qco_host::mm.out"]
    outputs = HostRunner().run(pte, [inputs])[0]
    for x, w, out in zip(inputs, weights, outputs):
        assert torch.equal(out, sequential_mm(x, w)), f"{tuple(x.shape)} @ {tuple(w.shape)}"


def test_quantize_matches_executorch():
    scale = 0.0117
    ties = (torch.arange(-600, 600, dtype=torch.float32) + 0.5) * scale  # every .5 rounds to even
    far = torch.tensor([1e6, -1e6, 3e9, -3e9, float("nan"), 0.0, -0.0])
    x = torch.cat([torch.randn(4000) * scale * 20000, ties, far])
    module = Quantizes(ENCODINGS)
    fast, slow = (program(module, (x,), speed) for speed in (True, False))
    assert "quantized_decomposed::quantize_per_tensor.out" not in program_operators(fast)
    ours, theirs = (HostRunner().run(pte, [(x,)])[0] for pte in (fast, slow))
    for (_, _, dtype, _), a, b in zip(ENCODINGS, ours, theirs):
        assert a.dtype == dtype and torch.equal(a, b), dtype


def attention_rows() -> torch.Tensor:
    """Rows as a quantized attention's softmax sees them: scores plus a -255 mask on most
    columns; rows sweeping value - max across exp's underflow (-110 to 0, where glibc's expf goes
    from denormals to 0); a row of -inf but one, a row with a NaN, a row of equal values, a row
    starting with a NaN, a row whose max is zeros of both signs."""
    scores = torch.randn(4, 32, 128) * 3
    scores[..., :96] -= 255
    sweep = torch.linspace(-110, 0, 128 * 64).view(64, 128)
    sweep[:, 0] = 0.0  # each row's max: its values are value - max
    special = torch.full((5, 128), float("-inf"))
    special[0, 5], special[1], special[1, 7], special[2] = 1.0, 0.5, float("nan"), 2.0
    special[3], special[3, 0] = torch.randn(128), float("nan")
    special[4], special[4, 3], special[4, 90] = -torch.rand(128) - 0.5, -0.0, 0.0
    return torch.cat([scores.view(-1, 128), sweep, special])


def test_softmax_matches_executorch():
    inputs = (attention_rows(), torch.randn(3, 40, 5) * 50)
    fast, slow = (program(Softmaxes(), inputs, speed) for speed in (True, False))
    assert "qco_host::_softmax.out" in program_operators(fast)
    assert "aten::_softmax.out" not in program_operators(fast)
    ours, theirs = (HostRunner().run(pte, [inputs])[0] for pte in (fast, slow))
    for a, b in zip(ours, theirs):
        assert torch.equal(a.nan_to_num(-1.0), b.nan_to_num(-1.0))


def test_permute_moves_the_same_elements():
    inputs = tuple((torch.randn(shape) * 100).to(dtype) for shape, _, dtype in PERMUTES)
    pte = program(Permutes(), inputs, speed=True)
    assert "qco_host::permute_copy.out" in program_operators(pte)
    outputs = HostRunner().run(pte, [inputs])[0]
    for x, (_, dims, _), out in zip(inputs, PERMUTES, outputs):
        assert torch.equal(out, x.permute(dims)), (tuple(x.shape), dims)


def test_expand_repeats_the_same_elements():
    inputs = tuple((torch.randn(shape) * 100).to(dtype) for shape, _, dtype in EXPANDS)
    pte = program(Expands(), inputs, speed=True)
    assert "qco_host::expand_copy.out" in program_operators(pte)
    assert "aten::expand_copy.out" not in program_operators(pte)
    outputs = HostRunner().run(pte, [inputs])[0]
    for x, (_, size, _), out in zip(inputs, EXPANDS, outputs):
        assert torch.equal(out, x.expand(size)), (tuple(x.shape), size)


def test_add_matches_executorch():
    inputs = tuple(torch.randn(shape) * 1e3 for pair in ADDS for shape in pair)
    inputs[0].view(-1)[:4] = torch.tensor([float("inf"), float("nan"), -0.0, 3e38])
    inputs[1].view(-1)[:4] = torch.tensor([float("-inf"), 1.0, -0.0, 3e38])
    fast, slow = (program(Adds(), inputs, speed) for speed in (True, False))
    assert "qco_host::add.out" in program_operators(fast)
    assert "aten::add.out" not in program_operators(fast)
    ours, theirs = (HostRunner().run(pte, [inputs])[0] for pte in (fast, slow))
    for a, b in zip(ours, theirs):
        assert torch.equal(a.nan_to_num(0.5), b.nan_to_num(0.5)) and torch.equal(a.signbit(), b.signbit())


def test_layout_between_quantizations_of_one_encoding_runs_on_the_codes():
    x = torch.randn(1, 8, 4, 16)
    moved = program(Requantized(), (x,), speed=True, passes=(LayoutOnCodes,))
    unmoved = program(Requantized(), (x,), speed=False)
    quantize = "quantized_decomposed::quantize_per_tensor.out"
    assert [sum(op == quantize for op in ops(pte)) for pte in (moved, unmoved)] == [3, 4]
    ours, theirs = (HostRunner().run(pte, [(x,)])[0] for pte in (moved, unmoved))
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


def ops(pte: bytes) -> list[str]:
    """The program's operator calls in order (one name per instruction)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte)
    plan = getattr(program, "program", program).execution_plan[0]
    names = [f"{op.name}.{op.overload}" for op in plan.operators]
    calls = [i.instr_args for chain in plan.chains for i in chain.instructions]
    return [names[call.op_index] for call in calls if hasattr(call, "op_index")]


class ScaledAdd(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.add(x, y, alpha=2)


def test_only_what_the_speed_kernels_compute_the_same_is_moved():
    """A 32-bit quantize (outside float's exact integers), a float64 mm and softmax, and an add
    with alpha stay ExecuTorch's."""
    x = torch.randn(8, 8)
    wide = program(Quantizes([(-(2**31), 2**31 - 1, torch.int32, 0)]), (x,), speed=True)
    assert "quantized_decomposed::quantize_per_tensor.out" in program_operators(wide)
    doubles = (x.double(), x.double())
    assert "aten::mm.out" in program_operators(program(Products(), doubles, speed=True))
    assert "aten::_softmax.out" in program_operators(program(Softmaxes(), doubles, speed=True))
    assert "aten::add.out" in program_operators(program(ScaledAdd(), (x, x), speed=True))


def method_ops(pte: bytes, method: str) -> list[str]:
    """The operator calls of one method of the program, in order."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte)
    (plan,) = [p for p in getattr(program, "program", program).execution_plan if p.name == method]
    names = [f"{op.name}.{op.overload}" for op in plan.operators]
    calls = [i.instr_args for chain in plan.chains for i in chain.instructions]
    return [names[call.op_index] for call in calls if hasattr(call, "op_index")]


#: The speed ops ExecuTorch's own kernels' bits are compared through in an LLM: products on
#: ``qco_host::mm``/``bmm`` either way, since a process that imported ``executorch.kernels.quantized``
#: (lowering does) may route ExecuTorch's ``mm`` to torch's BLAS, another order of sums.
REFERENCE_SPEED_OPS = {"mm", "bmm", "permute_copy", "quantize_per_tensor"}


def test_a_16a8w_llm_on_the_speed_kernels_computes_executorchs_logits():
    """A grouped-query Qwen3 (random weights), 16a8w, through the device runner's loop, lowered
    with the speed kernels and with ExecuTorch's softmax, add and expand_copy and plain products
    (REFERENCE_SPEED_OPS): the prompt's logits are the same bits, and the speed program's prefill
    runs every product of a weight as panels, every softmax, add and head repeat on the speed
    kernels."""
    from unittest import mock

    import transformers

    from qnn_custom_ops.llm import RunnerLoop, export_llm, host_step, quantize_llm
    from qnn_custom_ops.llm_ops import llm_binding, package_dir
    from qnn_custom_ops.llm.checkpoint import METHODS
    from qnn_custom_ops.lowering import host_speed
    from qnn_custom_ops.lowering.program import lower_methods
    from qnn_custom_ops.runtime.host_library import build_host_library

    from tests.hf_models import COMMON

    torch.manual_seed(0)
    config = transformers.Qwen3Config(**{**COMMON, "initializer_range": 0.05}, head_dim=16, num_hidden_layers=1)
    programs = export_llm(transformers.Qwen3ForCausalLM(config).eval(), prefill_len=16, ctx_len=48, cache="runner")
    prompts = torch.randint(0, COMMON["vocab_size"], (3, 16)).tolist()
    modules = quantize_llm(programs, "16a8w", prompts, 4)
    methods = dict(zip(METHODS, zip(modules, (programs.prefill.example_inputs, programs.decode.example_inputs))))
    speed = lower_methods(methods, llm_binding(), "host", plan_outputs=False).buffer
    moved = host_speed._speed_target

    def reference_target(node: torch.fx.Node):
        target = moved(node)
        return target if target is not None and target.__name__.split(".")[1] in REFERENCE_SPEED_OPS else None

    with mock.patch.object(host_speed, "_speed_target", reference_target), \
            mock.patch.object(host_speed, "_weights_as_panels", lambda exported: None):
        reference = lower_methods(methods, llm_binding(), "host", plan_outputs=False).buffer
    runner = HostRunner([build_host_library(package_dir(), llm_binding())])
    ours, theirs = (RunnerLoop(programs.shape, *(host_step(runner, pte, m) for m in METHODS)).score(prompts[0])
                    for pte in (speed, reference))
    assert torch.equal(ours, theirs)
    prefill, before = method_ops(speed, METHODS[0]), method_ops(reference, METHODS[0])
    assert {"qco_host::mm_panels.out", "qco_host::_softmax.out", "qco_host::add.out",
            "qco_host::expand_copy.out"} <= set(prefill)
    assert not {"aten::_softmax.out", "aten::add.out", "aten::expand_copy.out", "qco_host::mm.out"} & set(prefill)
    assert {"aten::_softmax.out", "aten::add.out", "aten::expand_copy.out", "qco_host::mm.out"} <= set(before)
