"""The LLM op library: each op's kernel against its PyTorch reference, in float32 and fp16
(C ABI), through ExecuTorch on the host in float and in each quantized encoding (real PT2E,
real lowering, quantized emulation), odd shapes, parameters, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import qnn_custom_ops as qco
from qnn_custom_ops.llm_ops import LlmOpInputError, llm_binding, llm_ops, llm_quant_overrides, package_dir
from qnn_custom_ops.llm_ops import reference as ref
from qnn_custom_ops.opdef import Datatype
from qnn_custom_ops.runtime import HostRunner, KernelDType, KernelError, KernelLibrary, KernelTensor, Tolerance
from qnn_custom_ops.runtime import build_host_kernels, compare_outputs

from tests.torch_ops import pt2e_quantize

OPS = llm_ops()
F16, F32, I32 = KernelDType.Float16, KernelDType.Float32, KernelDType.Int32


def i32(*rows):
    return torch.tensor(rows, dtype=torch.int32)


@pytest.fixture(scope="module")
def library():
    return qco.build_host_library(package_dir(), llm_binding())


@pytest.fixture(scope="module")
def kernels(library):
    return KernelLibrary(library, "LlmOpPackage")


class AllOps(torch.nn.Module):
    """Every op of the library, with odd sizes (13, 5, 7: no multiple of 8), batch 2, each
    parameter value, padding positions and out-of-range reads; RoPE tables per sequence with a
    partial rotary, and the KV ops on QEfficient's int64 [b, 1] slots and [b, 1, n] indices."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, 13))

    def forward(self, x, gated, rot, cos, sin, cache, slots, positions, updates, indices, batch_index,
                sequence_cos, sequence_sin, qeff_slots, qeff_positions, qeff_indices):
        return (
            OPS["rms_norm"](x, self.weight),
            OPS["rms_norm"](x, self.weight, 1e-2),
            *OPS["fused_add_rms_norm"](x, x.flip(0), self.weight),
            OPS["silu_and_mul"](gated),
            OPS["gelu_and_mul"](gated),
            OPS["gelu_and_mul"](gated, "tanh"),
            OPS["rope"](rot, cos, sin),
            OPS["rope"](rot, cos, sin, "gptj"),
            OPS["ctx_scatter"](cache, positions, updates),
            OPS["ctx_gather"](cache, indices),
            OPS["ctx_scatter_cb"](slots, batch_index, positions, updates),
            OPS["ctx_gather_cb"](slots, batch_index, indices),
            OPS["rope"](rot, sequence_cos, sequence_sin),
            OPS["rope"](rot, sequence_cos, sequence_sin, "gptj"),
            OPS["ctx_scatter_cb"](slots, qeff_slots, qeff_positions, updates, "from_end"),
            OPS["ctx_gather_cb"](slots, qeff_slots, qeff_indices, "from_end"),
        )


def all_ops_inputs(seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    angles = torch.rand(5, 5, generator=g) * 6.28
    return (
        torch.randn(2, 3, 13, generator=g) * 2,
        torch.randn(2, 5, 26, generator=g),
        torch.randn(2, 3, 5, 10, generator=g),
        torch.cos(angles), torch.sin(angles),
        torch.randn(2, 3, 7, 6, generator=g),
        torch.randn(4, 3, 7, 6, generator=g),
        torch.tensor([[1, 4], [0, -1]], dtype=torch.int32),  # -1: a padding position, skipped
        torch.randn(2, 3, 2, 6, generator=g),
        torch.tensor([[0, 6, 9], [2, 2, 5]], dtype=torch.int32),  # 9: outside the cache, reads 0
        torch.tensor([3, 1], dtype=torch.int32),
        torch.cos(angles[None, :, :3].expand(2, 5, 3) + torch.tensor([[[0.0]], [[1.0]]])),  # 6 of 10 rotate
        torch.sin(angles[None, :, :3].expand(2, 5, 3) + torch.tensor([[[0.0]], [[1.0]]])),
        torch.tensor([[3], [1]]),  # int64, as QEfficient passes them
        torch.tensor([[1, 4], [0, -1]]),  # -1: QEfficient's padding, written to the last row
        torch.tensor([[[0, -1, 2]], [[-1, 5, 9]]]),
    )


def test_references_follow_the_documented_semantics():
    """The references are the contract; check them against first principles once."""
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(ref.rms_norm(x, torch.ones(8)), torch.nn.functional.rms_norm(x, (8,), eps=1e-6))
    rot = torch.randn(1, 1, 1, 4)
    c, s = torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]])  # pair 0 turned by 90 degrees, pair 1 kept
    neox = ref.rope(rot, c, s)
    assert torch.equal(neox[..., [0, 2]], torch.stack((-rot[..., 2], rot[..., 0]), -1))
    assert torch.equal(neox[..., [1, 3]], rot[..., [1, 3]])
    gptj = ref.rope(rot, c, s, "gptj")
    assert torch.equal(gptj[..., :2], torch.stack((-rot[..., 1], rot[..., 0]), -1))
    cache = torch.zeros(1, 1, 3, 2)
    out = ref.ctx_scatter(cache, torch.tensor([[2, -1]], dtype=torch.int32), torch.ones(1, 1, 2, 2))
    assert out[0, 0].tolist() == [[0, 0], [0, 0], [1, 1]] and cache.abs().sum() == 0  # a new cache
    assert ref.ctx_gather(out, torch.tensor([[2, 3]], dtype=torch.int32))[0, 0].tolist() == [[1, 1], [0, 0]]


@pytest.mark.slow
def test_rope_computes_hugging_faces_own_rotary_per_sequence_partial_neox_and_gptj():
    """Each sequence at its own positions (continuous batching decode), 8 of 16 channels
    rotating: the op gives what Phi-3's (neox, partial) and GPT-J's (gptj) own functions give."""
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_rotary
    from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb as phi3_rotary

    positions = torch.tensor([[7, 8, 9, 10], [0, 1, 2, 3]])
    rotary = 8
    theta = positions[..., None].float() / 10000 ** (torch.arange(0, rotary, 2).float() / rotary)
    cos, sin = theta.cos(), theta.sin()  # [batch, seq, rotary / 2]
    q = torch.randn(2, 3, 4, 16, generator=torch.Generator().manual_seed(4))
    expected, _ = phi3_rotary(q, q, torch.cat((cos, cos), -1), torch.cat((sin, sin), -1))
    torch.testing.assert_close(OPS["rope"](q, cos, sin), expected)
    by_position = q.transpose(1, 2)  # GPT-J's layout: [batch, seq, heads, head_dim]
    turned = gptj_rotary(by_position[..., :rotary], sin, cos)
    expected = torch.cat((turned, by_position[..., rotary:]), -1).transpose(1, 2)
    torch.testing.assert_close(OPS["rope"](q, cos, sin, "gptj"), expected)


def qefficient_cache(batch: int = 2, heads: int = 3, ctx_len: int = 8, dim: int = 4):
    """A cache and a prefill's rows as QEfficient hands them to its CtxScatter/CtxGather: int64
    positions with -1 for padding, batch_index [batch, 1], ctx_indices [batch, 1, ctx_len] with
    the rows past each sequence's last position pointed at row 0 (its eager ``invalid_idx_value``)."""
    g = torch.Generator().manual_seed(5)
    cache = torch.randn(batch, heads, ctx_len, dim, generator=g)
    positions = torch.tensor([[3, 4, 5], [0, 1, -1]])
    updates = torch.randn(batch, heads, 3, dim, generator=g)
    batch_index = torch.tensor([[1], [0]])
    limit = positions.max(1, keepdim=True).values.unsqueeze(1)
    ctx_indices = torch.arange(ctx_len)[None, None, :].expand(batch, 1, ctx_len)
    return cache, positions, updates, batch_index, torch.where(ctx_indices > limit, 0, ctx_indices)


def test_kv_ops_from_end_are_qefficients_indexing_on_its_shapes_and_int64_indices():
    """QEfficient's CtxScatter/CtxGather (and CB) are torch advanced indexing: its padding
    position -1 writes and reads the last row. ``negative="from_end"`` gives exactly that."""
    cache, positions, updates, batch_index, ctx_indices = qefficient_cache()
    heads = torch.arange(cache.shape[1]).view(1, -1, 1)

    expected = cache.clone()
    expected[batch_index.view(-1, 1, 1), heads, positions.unsqueeze(1)] = updates
    scattered = OPS["ctx_scatter_cb"](cache, batch_index, positions, updates, "from_end")
    assert torch.equal(scattered, expected) and expected[0, :, -1].ne(cache[0, :, -1]).all()  # the last row written
    gathered = OPS["ctx_gather_cb"](scattered, batch_index, ctx_indices, "from_end")
    assert torch.equal(gathered, expected[batch_index.view(-1, 1, 1), heads, ctx_indices])

    expected = cache.clone()
    expected[torch.arange(2).view(-1, 1, 1), heads, positions.unsqueeze(1)] = updates
    scattered = OPS["ctx_scatter"](cache, positions, updates, "from_end")
    assert torch.equal(scattered, expected)
    gathered = OPS["ctx_gather"](scattered, ctx_indices, "from_end")
    assert torch.equal(gathered, expected[torch.arange(2).view(-1, 1, 1), heads, ctx_indices])

    skipped = OPS["ctx_scatter"](cache, positions, updates)  # ours: padding is not written
    assert torch.equal(skipped[1, :, -1], cache[1, :, -1])
    assert torch.equal(OPS["ctx_gather"](cache, torch.tensor([[-1, 9]]).expand(2, 2)), torch.zeros(2, 3, 2, 4))


@pytest.mark.slow
@pytest.mark.parametrize("negative", [0, 1], ids=["skip", "from_end"])
def test_kv_kernels_compute_their_reference_on_qefficients_shapes(kernels, negative):
    """The kernels take [batch, 1] slots and [batch, 1, n] indices, and both index modes."""
    cache, positions, updates, batch_index, ctx_indices = qefficient_cache()
    mode = ref.NEGATIVE_INDICES[negative]
    param = [KernelTensor(np.array(negative, np.uint32), KernelDType.UInt32)]
    index = [KernelTensor(t.int().numpy(), I32) for t in (batch_index, positions, ctx_indices)]
    scattered = KernelTensor.empty(cache.shape, F32)
    kernels.run("CtxScatterCb", [scattered], [kernel_tensor(cache, F32), index[0], index[1],
                                               kernel_tensor(updates, F32)], param)
    expected = ref.ctx_scatter_cb(cache, batch_index, positions, updates, mode)
    assert torch.equal(torch.from_numpy(scattered.array), expected)
    gathered = KernelTensor.empty(ctx_indices.shape[:1] + cache.shape[1:2] + ctx_indices.shape[2:] + cache.shape[3:],
                                  F32)
    kernels.run("CtxGatherCb", [gathered], [scattered, index[0], index[2]], param)
    assert torch.equal(torch.from_numpy(gathered.array), ref.ctx_gather_cb(expected, batch_index, ctx_indices, mode))


@pytest.mark.slow
def test_every_op_in_float32_on_executorch_matches_its_reference(library):
    model = AllOps().eval()
    inputs = all_ops_inputs(0)
    program = qco.lower(model, inputs, llm_binding(), target="host")
    outputs = HostRunner([library]).run(program.buffer, [inputs])[0]
    with torch.no_grad():
        expected = model(*inputs)
    assert len(outputs) == len(expected)
    for index, (got, want) in enumerate(zip(outputs, expected)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"output {index}")


@pytest.mark.parametrize("quant_dtype, activation, weight", [
    ("8a8w", Datatype.UFIXED_POINT_8, Datatype.SFIXED_POINT_8),
    ("16a8w", Datatype.UFIXED_POINT_16, Datatype.UFIXED_POINT_8),
    ("16a16w", Datatype.UFIXED_POINT_16, Datatype.SFIXED_POINT_16),
])
@pytest.mark.slow
def test_every_op_quantized_matches_the_converted_model_within_one_step(library, quant_dtype, activation, weight):
    """The kernels run on the codes (quantized emulation) with the encodings PT2E chose; the
    KV-cache ops keep the cache's encoding for updates and results."""
    samples = [all_ops_inputs(seed) for seed in range(3)]
    converted = pt2e_quantize(AllOps().eval(), samples, llm_binding(), quant_dtype, overrides=llm_quant_overrides())
    program = qco.lower(converted, samples[0], llm_binding(), target="host")
    outputs = HostRunner([library]).run(program.buffer, [samples[0]])[0]
    assert {e.qnn_op_type for e in program.emulated} == {
        "RmsNorm", "FusedAddRmsNorm", "SiluAndMul", "GeluAndMul", "Rope", "CtxScatter", "CtxGather", "CtxScatterCb",
        "CtxGatherCb"}
    for emulated in program.emulated:
        encodings = dict(emulated.tensors)
        if emulated.qnn_op_type == "RmsNorm":
            assert encodings["x"].datatype is activation and encodings["weight"].datatype is weight
        if emulated.qnn_op_type.startswith("Ctx"):
            cache, out = encodings["cache"], encodings["out"]
            assert (cache.scale, cache.offset) == (out.scale, out.offset), emulated
            if "updates" in encodings:
                assert (encodings["updates"].scale, encodings["updates"].offset) == (cache.scale, cache.offset)
            assert "position_ids" not in encodings or encodings["position_ids"].datatype is Datatype.INT_32
    with torch.no_grad():
        reference = converted(*samples[0])
    reports = compare_outputs(outputs, reference, Tolerance(atol=0, lsb=1), encodings=program.output_encodings)
    assert all(r.passed for r in reports), [str(r) for r in reports if not r.passed]


def kernel_tensor(tensor: torch.Tensor, dtype: KernelDType) -> KernelTensor:
    return KernelTensor(tensor.numpy(), dtype)


@pytest.mark.parametrize("op, qnn_type, args", [
    ("rms_norm", "RmsNorm", lambda g: (torch.randn(3, 13, generator=g), torch.rand(13, generator=g) + 0.5)),
    ("silu_and_mul", "SiluAndMul", lambda g: (torch.randn(3, 2, 18, generator=g),)),
    ("gelu_and_mul", "GeluAndMul", lambda g: (torch.randn(3, 18, generator=g),)),
    ("rope", "Rope", lambda g: (torch.randn(1, 2, 3, 6, generator=g), torch.rand(3, 3, generator=g),
                                torch.rand(3, 3, generator=g))),
    ("rope", "Rope", lambda g: (torch.randn(2, 2, 3, 10, generator=g), torch.rand(2, 3, 3, generator=g),
                                torch.rand(2, 3, 3, generator=g))),  # per sequence, 6 of 10 rotate
])
@pytest.mark.slow
def test_fp16_kernels_match_the_reference_computed_in_float(kernels, op, qnn_type, args):
    """fp16 tensors are read and written in software (no portable fp16 type): the kernel
    computes in float32 and rounds once, as the reference does."""
    inputs = [t.half() for t in args(torch.Generator().manual_seed(2))]
    expected = getattr(ref, op)(*inputs)
    out = KernelTensor.empty(expected.shape, F16)
    kernels.run(qnn_type, [out], [kernel_tensor(t, F16) for t in inputs])
    got = torch.from_numpy(out.array)
    assert got.dtype == torch.float16
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)  # one fp16 rounding either side


@pytest.mark.slow
def test_fp16_conversions_are_exact_for_every_half_and_round_to_nearest_even(kernels):
    """All 65536 halves to float and back (through CtxGather, which converts when the cache and
    its result differ in dtype), and floats at the edges (ties, subnormals, overflow, NaN)."""
    halves = np.arange(65536, dtype=np.uint16).view(np.float16).reshape(1, 1, 65536, 1)
    indices = np.arange(65536, dtype=np.int32).reshape(1, 65536)
    as_float = KernelTensor.empty((1, 1, 65536, 1), F32)
    kernels.run("CtxGather", [as_float], [KernelTensor(halves, F16), KernelTensor(indices, I32)])
    np.testing.assert_array_equal(as_float.array, halves.astype(np.float32))  # NaN == NaN here

    g = np.random.default_rng(3)
    edges = np.array([65504, 65519.99, 65520, 1e6, 6.1e-5, 6.0e-5, 5.96e-8, 2.98e-8, 2.99e-8, 1e-9, 0.0, -0.0,
                      1.00048828125, 1.00146484375, np.inf, np.nan], dtype=np.float32)
    floats = np.concatenate([edges, -edges, g.standard_normal(4096).astype(np.float32) * 10,
                             (g.random(4096) * 1e-4).astype(np.float32)]).reshape(1, 1, -1, 1)
    as_half = KernelTensor.empty(floats.shape, F16)
    positions = np.arange(floats.shape[2], dtype=np.int32).reshape(1, -1)
    kernels.run("CtxGather", [as_half], [KernelTensor(floats, F32), KernelTensor(positions, I32)])
    np.testing.assert_array_equal(as_half.array.view(np.uint16) & 0x7fff == 0x7e00,
                                  np.isnan(floats))  # a NaN stays a NaN
    finite = ~np.isnan(floats)
    with np.errstate(over="ignore"):  # numpy says so when a float rounds to infinity, as it must
        expected = floats[finite].astype(np.float16)
    np.testing.assert_array_equal(as_half.array[finite].view(np.uint16), expected.view(np.uint16))


GATE_EDGES = [float("inf"), float("-inf"), float("nan"), 1e13, -1e13, 88.5, -20.0, 0.0, 1.0, 1.0]
UP_EDGES = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, float("-inf"), float("inf"), float("nan")]


@pytest.mark.slow
@pytest.mark.parametrize("qnn_type, approximate, activation", [
    ("SiluAndMul", None, torch.nn.functional.silu),
    ("GeluAndMul", "tanh", lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
    ("GeluAndMul", "none", torch.nn.functional.gelu),
])
def test_gated_kernels_match_eager_at_infinities_and_nan(kernels, qnn_type, approximate, activation):
    """gelu(+inf) * 1 is inf, gelu(-inf) * 1 and anything * NaN are NaN, as eager computes them
    (in float64: torch's float32 CPU GELU without approximation says NaN for +inf)."""
    gate, up = torch.tensor([GATE_EDGES]), torch.tensor([UP_EDGES])
    eager = (activation(gate.double()) * up.double()).float()
    out = KernelTensor.empty(eager.shape, F32)
    params = [] if approximate is None else [
        KernelTensor(np.array(ref.GELU_APPROXIMATIONS.index(approximate), np.uint32), KernelDType.UInt32)]
    kernels.run(qnn_type, [out], [kernel_tensor(torch.cat((gate, up), -1), F32)], params)
    torch.testing.assert_close(torch.from_numpy(out.array), eager, equal_nan=True)


@pytest.mark.parametrize("approximate", ref.GELU_APPROXIMATIONS)
def test_the_gelu_reference_is_inf_at_a_gate_of_inf_whatever_torchs_float32_gelu_says(monkeypatch, approximate):
    """torch 2.13's float32 CPU GELU says NaN for +inf on some machines (the kernel, rightly,
    says inf); the reference, which the kernel is judged by, must not inherit that."""
    gelu = torch.nn.functional.gelu

    def gelu_nan_at_inf(x, approximate="none"):
        result = gelu(x, approximate=approximate)
        return result.masked_fill(torch.isposinf(x), float("nan")) if x.dtype == torch.float32 else result

    monkeypatch.setattr(torch.nn.functional, "gelu", gelu_nan_at_inf)
    gate_up = torch.tensor([[float("inf"), 1.0, 2.0, 3.0]])
    finite = gelu(torch.tensor([1.0]), approximate=approximate) * 3
    assert OPS["gelu_and_mul"](gate_up, approximate).tolist() == [[float("inf"), finite.item()]]


@pytest.mark.parametrize("call, message", [
    (lambda: OPS["rms_norm"](torch.randn(2, 8), torch.ones(7)), r"weight has shape \[7\], expected \[8\]"),
    (lambda: OPS["rms_norm"](torch.ones(2, 8, dtype=torch.int32), torch.ones(8)), "x must be a floating tensor"),
    (lambda: OPS["silu_and_mul"](torch.randn(2, 7)), "its last dimension must be even"),
    (lambda: OPS["gelu_and_mul"](torch.randn(2, 8), "fast"), "approximate='fast'; use one of none, tanh"),
    (lambda: OPS["rope"](torch.randn(1, 1, 3, 4), torch.ones(3, 3), torch.ones(3, 3)),
     r"cos has shape \[3, 3\], expected \[seq, rotary / 2\] or \[batch, seq, rotary / 2\] with 0 < rotary "
     r"<= head_dim \(4\)"),
    (lambda: OPS["rope"](torch.randn(2, 1, 3, 4), torch.ones(1, 3, 2), torch.ones(1, 3, 2)),
     r"cos has shape \[1, 3, 2\], expected \[2, 3, 2\] \(\[batch, seq, rotary / 2\]\)"),
    (lambda: OPS["rope"](torch.randn(1, 1, 3, 4), torch.ones(3, 2), torch.ones(3, 2), "llama"), "style='llama'"),
    (lambda: OPS["ctx_scatter"](torch.zeros(1, 2, 4, 3), torch.zeros(1, 1), torch.zeros(1, 2, 1, 3)),
     r"position_ids must be int32 .* or int64, got torch.float32: pass position_ids.int\(\)"),
    (lambda: OPS["ctx_gather"](torch.zeros(1, 2, 4, 3), torch.zeros(1, 2, 1, dtype=torch.int32)),
     r"ctx_indices has shape \[1, 2, 1\], expected \[batch, n\] or \[batch, 1, n\]"),
    (lambda: OPS["ctx_gather"](torch.zeros(1, 2, 4, 3), torch.zeros(1, 1, dtype=torch.int32), "wrap"),
     "negative='wrap'; use one of skip, from_end"),
    (lambda: OPS["ctx_scatter"](torch.zeros(1, 2, 4, 3), torch.zeros(1, 1, dtype=torch.int32), torch.zeros(1, 2, 2, 3)),
     r"updates has shape \[1, 2, 2, 3\], expected \[1, 2, 1, 3\]"),
    (lambda: OPS["ctx_gather"](torch.zeros(2, 2, 4, 3), torch.zeros(1, 1, dtype=torch.int32)),
     "ctx_indices has batch 1, the cache 2"),
    (lambda: OPS["ctx_gather_cb"](torch.zeros(2, 2, 4, 3), torch.tensor([5], dtype=torch.int32),
                                  torch.zeros(1, 1, dtype=torch.int32)), r"batch_index \[5\] names a slot outside"),
])
def test_bad_input_is_refused_with_the_op_and_the_fix(call, message):
    with pytest.raises(LlmOpInputError, match=message) as info:
        call()
    assert str(info.value).startswith("qco_llm::")


@pytest.mark.parametrize("op, args, out, message", [
    ("rms_norm", (torch.randn(2, 8), torch.ones(8)), torch.empty(2, 8, dtype=torch.int32),
     r"out has dtype torch.int32, expected torch.float32 \(the result's; \.out does not cast\): "
     r"pass out=torch.empty\(\[2, 8\], dtype=torch.float32\)"),
    ("rms_norm", (torch.randn(2, 8), torch.ones(8)), torch.empty(3, 8),
     r"out has shape \[3, 8\], expected \[2, 8\] \(the result's; \.out does not resize or broadcast\)"),
    ("rms_norm", (torch.randn(2, 8), torch.ones(8)), torch.empty(4, 2, 8), r"out has shape \[4, 2, 8\]"),
    ("silu_and_mul", (torch.randn(2, 8),), torch.empty(2, 8), r"out has shape \[2, 8\], expected \[2, 4\]"),
    ("ctx_gather", (torch.zeros(1, 2, 4, 3), i32([0])), torch.empty(1, 2, 1, 3, dtype=torch.float64),
     "out has dtype torch.float64, expected torch.float32"),
], ids=["int32 out", "fewer rows", "broadcastable", "gated out not halved", "float64 out"])
def test_out_variants_refuse_an_out_of_another_dtype_or_shape_eagerly_and_under_export(op, args, out, message):
    """As torch's own out= ops refuse a dtype they cannot write: never a silent cast or broadcast."""
    out_variant = getattr(torch.ops.qco_llm, op).out
    with pytest.raises(LlmOpInputError, match=f"^qco_llm::{op}: {message}"):
        out_variant(*args, out=out)

    class WritesInto(torch.nn.Module):
        def forward(self, *inputs):
            return out_variant(*inputs[:-1], out=inputs[-1])

    with pytest.raises(LlmOpInputError, match=message):
        torch.export.export(WritesInto(), (*args, out))


def test_an_out_variant_writes_into_its_out_and_returns_it():
    x, weight, out = torch.randn(2, 8), torch.rand(8), torch.empty(2, 8)
    assert torch.ops.qco_llm.rms_norm.out(x, weight, 1e-2, out=out) is out
    torch.testing.assert_close(out, ref.rms_norm(x, weight, 1e-2), rtol=0, atol=0)


@pytest.mark.parametrize("x, weight, message", [
    (torch.randn(2, 8), torch.ones(7), "weight has shape"),
    (torch.tensor(2.0), torch.ones(1), "x must have at least one dimension"),  # as torch's rms_norm refuses
])
def test_bad_input_fails_the_same_way_under_export(x, weight, message):
    with pytest.raises(LlmOpInputError, match=message):
        OPS["rms_norm"](x, weight)
    with pytest.raises(LlmOpInputError, match=message):
        torch.export.export(OneOp("rms_norm"), (x, weight))


@pytest.mark.slow
@pytest.mark.parametrize("qnn_type, outputs, inputs", [
    ("RmsNorm", [np.zeros((2, 8), np.float32)], [np.zeros((2, 8), np.float32), np.zeros(7, np.float32)]),
    ("SiluAndMul", [np.zeros((2, 4), np.float32)], [np.zeros((2, 7), np.float32)]),
    ("Rope", [np.zeros((1, 1, 2, 4), np.float32)],
     [np.zeros((1, 1, 2, 4), np.float32), np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)]),
    ("CtxGather", [np.zeros((1, 1, 2, 3), np.float32)], [np.zeros((1, 1, 4, 3), np.float32), np.zeros((2, 2), np.int32)]),
    ("RmsNorm", [np.zeros((), np.float32)], [np.array(2.0, np.float32), np.ones(1, np.float32)]),  # 0-D x, as eager
])
def test_kernels_refuse_mismatched_shapes(kernels, qnn_type, outputs, inputs):
    """What reaches a kernel unchecked (the HTP, the C ABI) is still checked there."""
    def tensor(a):
        return KernelTensor(a, I32 if a.dtype == np.int32 else F32)

    with pytest.raises(KernelError, match=f"kernel {qnn_type} failed: shape mismatch"):
        kernels.run(qnn_type, [tensor(a) for a in outputs], [tensor(a) for a in inputs])


class OneOp(torch.nn.Module):
    """One library op as a module, for torch.export."""

    def __init__(self, op: str):
        super().__init__()
        self.op = OPS[op]

    def forward(self, *args):
        return self.op(*args)


@pytest.mark.parametrize("op, qnn_type, args", [
    ("rms_norm", "RmsNorm", (torch.randn(0, 8), torch.ones(8))),
    ("rms_norm", "RmsNorm", (torch.randn(2, 0), torch.ones(0))),
    ("silu_and_mul", "SiluAndMul", (torch.randn(2, 0),)),
    ("gelu_and_mul", "GeluAndMul", (torch.randn(0, 3, 4),)),
    ("rope", "Rope", (torch.randn(1, 2, 0, 4), torch.ones(0, 2), torch.ones(0, 2))),
    ("ctx_scatter", "CtxScatter", (torch.zeros(1, 2, 0, 3), i32([0]), torch.ones(1, 2, 1, 3))),
    ("ctx_gather", "CtxGather", (torch.ones(1, 2, 0, 3), i32([0, 1]))),  # ctx_len 0: every row reads 0
    ("ctx_gather", "CtxGather", (torch.ones(1, 2, 4, 0), i32([0, 9]))),
    ("ctx_scatter_cb", "CtxScatterCb", (torch.zeros(2, 2, 0, 3), i32(1), i32([0]), torch.ones(1, 2, 1, 3))),
    ("ctx_gather_cb", "CtxGatherCb", (torch.ones(2, 2, 0, 3), i32(1), i32([0, 1]))),
])
@pytest.mark.slow
def test_empty_dimensions_agree_in_the_reference_under_export_and_in_the_kernel(kernels, op, qnn_type, args):
    """A dimension of size 0 (no rows, an empty hidden size, an empty cache) is valid for eager,
    for the fake kernel torch.export runs, and for the kernel, and all give the same result."""
    expected = OPS[op](*args)
    graph = torch.export.export(OneOp(op), args).graph
    (fake,) = [node.meta["val"] for node in graph.nodes if node.op == "call_function"]
    assert (fake.shape, fake.dtype) == (expected.shape, expected.dtype)
    out = KernelTensor.empty(expected.shape, F32)
    kernels.run(qnn_type, [out], [kernel_tensor(a, I32 if a.dtype == torch.int32 else F32) for a in args])
    torch.testing.assert_close(torch.from_numpy(out.array), expected)


def test_ctx_gather_over_an_empty_cache_reads_zeros():
    """Every index is outside [0, ctx_len) when ctx_len is 0: out-of-range rows read 0."""
    out = OPS["ctx_gather"](torch.ones(2, 3, 0, 4), i32([0, -1], [5, 0]))
    assert out.shape == (2, 3, 2, 4) and not out.any()


@pytest.mark.slow
def test_kernels_refuse_a_dtype_the_opdef_does_not_declare(kernels):
    with pytest.raises(KernelError, match="unsupported dtype"):
        kernels.run("SiluAndMul", [KernelTensor(np.zeros((2, 2), np.int32), I32)],
                    [KernelTensor(np.zeros((2, 4), np.int32), I32)])


CODES = {KernelDType.UFixed8: (np.uint8, 0, 255), KernelDType.UFixed16: (np.uint16, 0, 65535),
         KernelDType.SFixed8: (np.int8, -127, 127), KernelDType.SFixed16: (np.int16, -32767, 32767)}


def calibrated(real: torch.Tensor, dtype: KernelDType) -> tuple[float, int]:
    """(scale, offset) as PT2E's min/max observers choose them: asymmetric over [min, max] with
    zero inside for unsigned codes, symmetric for signed."""
    _, low, high = CODES[dtype]
    if low < 0:
        return float(real.abs().max()) / high, 0
    lo, hi = min(float(real.min()), 0.0), max(float(real.max()), 0.0)
    scale = (hi - lo) / high
    return scale, -round(-lo / scale)


def requantized(real: torch.Tensor, dtype: KernelDType, scale: float, offset: int) -> torch.Tensor:
    """Codes of ``real`` as torch quantizes: times the float32 reciprocal of the scale, round half
    to even, plus the zero point, saturated."""
    _, low, high = CODES[dtype]
    inverse = 1 / torch.tensor(scale, dtype=torch.float32)
    return (torch.round(real.float() * inverse) - offset).clamp(low, high)


def quantized_tensor(real: torch.Tensor, dtype: KernelDType) -> tuple[KernelTensor, torch.Tensor]:
    """The kernel tensor of ``real`` in a calibrated encoding, and the reals its codes stand for."""
    scale, offset = calibrated(real, dtype)
    codes = requantized(real, dtype, scale, offset)
    return KernelTensor(codes.numpy().astype(CODES[dtype][0]), dtype, scale, offset), scale * (codes + offset)


def angles(g: torch.Generator, seq: int, half: int) -> tuple[torch.Tensor, torch.Tensor]:
    theta = torch.rand(seq, half, generator=g) * 6.28
    return torch.cos(theta), torch.sin(theta)


def sequence_angles(g: torch.Generator, batch: int, seq: int, half: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tables of [batch, seq, half]: each sequence at its own positions."""
    theta = torch.rand(batch, seq, half, generator=g) * 6.28
    return torch.cos(theta), torch.sin(theta)


QUANTIZED_OPS = {  # op: (qnn type, params, inputs of a hidden size, the reference on reals, static inputs)
    "rms_norm": ("RmsNorm", (), lambda g, n: (torch.randn(4, n, generator=g) * 3, torch.rand(n, generator=g) + 0.5),
                 ref.rms_norm, {1}),
    "silu_and_mul": ("SiluAndMul", (), lambda g, n: (torch.randn(4, 2 * n, generator=g) * 2,), ref.silu_and_mul, set()),
    "gelu_and_mul": ("GeluAndMul", (), lambda g, n: (torch.randn(4, 2 * n, generator=g) * 2,), ref.gelu_and_mul,
                     set()),
    "gelu_and_mul tanh": ("GeluAndMul", (KernelTensor(np.array(1, np.uint32), KernelDType.UInt32),),
                          lambda g, n: (torch.randn(4, 2 * n, generator=g) * 2,),
                          lambda x: ref.gelu_and_mul(x, "tanh"), set()),
    "rope": ("Rope", (), lambda g, n: (torch.randn(1, 2, n // 64, 128, generator=g) * 2, *angles(g, n // 64, 64)),
             ref.rope, set()),
    "rope gptj": ("Rope", (KernelTensor(np.array(1, np.uint32), KernelDType.UInt32),),
                  lambda g, n: (torch.randn(1, 2, n // 64, 128, generator=g) * 2, *angles(g, n // 64, 64)),
                  lambda x, c, s: ref.rope(x, c, s, "gptj"), set()),
    # each sequence at its own positions, 48 of 80 channels rotating (partial rotary)
    "rope per-sequence partial": ("Rope", (), lambda g, n: (torch.randn(2, 2, n // 128, 80, generator=g) * 2,
                                                           *sequence_angles(g, 2, n // 128, 24)), ref.rope, set()),
    "rope per-sequence partial gptj": ("Rope", (KernelTensor(np.array(1, np.uint32), KernelDType.UInt32),),
                                       lambda g, n: (torch.randn(2, 2, n // 128, 80, generator=g) * 2,
                                                     *sequence_angles(g, 2, n // 128, 24)),
                                       lambda x, c, s: ref.rope(x, c, s, "gptj"), set()),
}
U8, U16, S8, S16 = KernelDType.UFixed8, KernelDType.UFixed16, KernelDType.SFixed8, KernelDType.SFixed16


@pytest.fixture(scope="module")
def c_abi():
    """The package's kernels through the C ABI alone (no torch binding)."""
    return KernelLibrary(build_host_kernels(package_dir()), "LlmOpPackage")


@pytest.mark.slow
@pytest.mark.parametrize("activation, weight", [(U8, S8), (U16, U8), (U16, S16)], ids=["8a8w", "16a8w", "16a16w"])
def test_fused_add_rms_norm_codes_are_within_one_step_of_the_float_reference(c_abi, activation, weight):
    """Both outputs within one step of the float reference requantized: the sum, and the norm
    of the sum (taken before the sum is stored, as vLLM takes it)."""
    g = torch.Generator().manual_seed(7)
    (x, x_real), (residual, residual_real) = (quantized_tensor(torch.randn(4, 769, generator=g) * s, activation)
                                              for s in (2, 5))
    gain, gain_real = quantized_tensor(torch.rand(769, generator=g) + 0.5, weight)
    norm_real, sum_real = ref.fused_add_rms_norm(x_real, residual_real, gain_real)
    encodings = [calibrated(real, activation) for real in (norm_real, sum_real)]
    outs = [KernelTensor.empty((4, 769), activation, *encoding) for encoding in encodings]
    c_abi.run("FusedAddRmsNorm", outs, [x, residual, gain])
    for out, real, encoding in zip(outs, (norm_real, sum_real), encodings):
        steps = (torch.from_numpy(out.array.astype(np.int64)) - requantized(real, activation, *encoding)).abs()
        assert steps.max() <= 1


def test_fused_add_rms_norm_is_vllms_residual_add_and_norm():
    """vLLM's native RMSNorm with a residual: x + residual in float32, normalised, then the
    weight; the sum is returned as the new residual (fp16 here, where the order shows)."""
    g = torch.Generator().manual_seed(8)
    x, residual = (torch.randn(3, 64, generator=g).half() for _ in range(2))
    weight = (torch.rand(64, generator=g) + 0.5).half()
    summed = x.float() + residual.float()
    normed = summed * torch.rsqrt(summed.pow(2).mean(-1, keepdim=True) + 1e-6)
    y, new_residual = OPS["fused_add_rms_norm"](x, residual, weight)
    assert torch.equal(new_residual, summed.half())
    torch.testing.assert_close(y, (normed * weight.float()).half(), rtol=1e-3, atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("cache_dtype, rows_dtype", [(U8, U8), (U8, U16), (U16, U8), (U16, U16)])
def test_kv_rows_in_another_encoding_are_requantized_within_one_step(c_abi, cache_dtype, rows_dtype):
    """Updates and gathered rows in an encoding other than the cache's (a quantizer that did not
    share them): each code within one step of its real requantized, in both directions."""
    g = torch.Generator().manual_seed(9)
    cache, cache_real = quantized_tensor(torch.randn(1, 2, 8, 24, generator=g) * 3, cache_dtype)
    updates, updates_real = quantized_tensor(torch.randn(1, 2, 3, 24, generator=g), rows_dtype)
    positions = torch.tensor([[6, 0, 3]], dtype=torch.int32)
    expected_real = ref.ctx_scatter(cache_real, positions, updates_real)
    scattered = KernelTensor.empty(cache.array.shape, cache_dtype, cache.scale, cache.offset)
    c_abi.run("CtxScatter", [scattered], [cache, KernelTensor(positions.numpy(), I32), updates])
    steps = torch.from_numpy(scattered.array.astype(np.int64)) - requantized(expected_real, cache_dtype, cache.scale,
                                                                              cache.offset)
    assert steps.abs().max() <= 1
    rows_scale, rows_offset = calibrated(cache_real, rows_dtype)
    gathered = KernelTensor.empty((1, 2, 3, 24), rows_dtype, rows_scale * 1.37, rows_offset // 2)
    c_abi.run("CtxGather", [gathered], [cache, KernelTensor(positions.numpy(), I32)])
    expected = requantized(ref.ctx_gather(cache_real, positions), rows_dtype, gathered.scale, gathered.offset)
    assert (torch.from_numpy(gathered.array.astype(np.int64)) - expected).abs().max() <= 1


@pytest.mark.slow
@pytest.mark.parametrize("activation, weight", [(U8, S8), (U16, U8), (U16, S16)], ids=["8a8w", "16a8w", "16a16w"])
@pytest.mark.parametrize("hidden", [769, 5125])
@pytest.mark.parametrize("op", sorted(QUANTIZED_OPS))
def test_quantized_kernels_are_within_one_step_of_the_float_reference_requantized(c_abi, op, hidden, activation,
                                                                                  weight):
    """On the codes and encodings a calibrated model hands them, at odd hidden sizes: the
    reference on the reals the input codes stand for, requantized with round half to even."""
    qnn_type, params, make, reference, static = QUANTIZED_OPS[op]
    reals = make(torch.Generator().manual_seed(hidden), hidden)
    tensors, dequantized = zip(*(quantized_tensor(t, weight if i in static else activation)
                                 for i, t in enumerate(reals)))
    expected_real = reference(*dequantized)
    scale, offset = calibrated(expected_real, activation)
    out = KernelTensor.empty(expected_real.shape, activation, scale, offset)
    c_abi.run(qnn_type, [out], list(tensors), list(params))
    expected = requantized(expected_real, activation, scale, offset)
    steps = (torch.from_numpy(out.array.astype(np.int64)) - expected).abs()
    assert steps.max() <= 1, f"{int(steps.max())} steps at {np.unravel_index(int(steps.argmax()), steps.shape)}"
