"""swap_modules on modules the project does not own: torch.nn.RMSNorm, and transformers'
Llama/Qwen/Gemma modules (constructed locally from a config, nothing downloaded)."""

from __future__ import annotations

import warnings

import pytest
import torch

from qnn_custom_ops.llm_ops import SelectError, swap_modules
from qnn_custom_ops.llm_ops.swap import QcoGatedMLP, QcoRMSNorm, SwapWarning, parse_select

from tests.torch_ops import Block, GatedMLP


def seeded_input(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("select, expected", [
    ("all", {"rms_norm", "silu_and_mul", "gelu_and_mul"}),
    ("none", set()),
    ("all,-rms_norm", {"silu_and_mul", "gelu_and_mul"}),
    ("none,+silu_and_mul", {"silu_and_mul"}),
    (" none , +rms_norm , +gelu_and_mul ", {"rms_norm", "gelu_and_mul"}),
    ("rms_norm", {"rms_norm"}),  # names without a base: exactly those ops
    ("+rms_norm,silu_and_mul", {"rms_norm", "silu_and_mul"}),
    ("-rms_norm", {"silu_and_mul", "gelu_and_mul"}),  # only -names: all but those
    ("+rms_norm,+rms_norm", {"rms_norm"}),
])
def test_select_follows_vllms_grammar(select, expected):
    assert parse_select(select) == expected


def test_a_plain_name_swaps_only_that_op():
    model = Block()
    assert [s.op for s in swap_modules(model, "rms_norm")] == ["rms_norm"]
    assert isinstance(model.mlp, GatedMLP)


@pytest.mark.parametrize("select", ["all,-rmsnorm", "none,+rope"])
def test_an_unknown_name_lists_the_known_ones(select):
    with pytest.raises(SelectError, match="known: rms_norm, silu_and_mul, gelu_and_mul"):
        swap_modules(Block(), select)


@pytest.mark.parametrize("select, message", [
    ("+rms_norm,-rms_norm", "rms_norm is both enabled and disabled: keep one of them"),
    ("rms_norm,-rms_norm", "rms_norm is both enabled and disabled"),
    ("--rms_norm", "'--rms_norm' has more than one sign: write \\+rms_norm or -rms_norm"),
    ("+all", "'\\+all': all and none take no sign and only come first"),
    ("-rms_norm,all", "'all': all and none take no sign and only come first"),
    ("all,none", "'none': all and none take no sign"),
    ("rms_norm,", "an empty entry"),
    ("", "an empty entry"),
])
def test_a_contradictory_or_malformed_select_is_refused(select, message):
    with pytest.raises(SelectError, match=message) as info:
        swap_modules(Block(), select)
    assert str(info.value).startswith(f"swap_modules: select={select!r}: ")


@pytest.mark.parametrize("select", [["all", "-rms_norm"], None, 1])
def test_a_select_that_is_not_a_string_is_a_type_error_naming_it(select):
    with pytest.raises(TypeError, match=r"swap_modules: select must be a comma-separated string .*got "):
        swap_modules(Block(), select)


def test_torch_rmsnorm_and_a_silu_mlp_are_swapped_and_compute_the_same():
    torch.manual_seed(0)
    model = Block().eval()
    x = seeded_input(2, 5, 16)
    with torch.no_grad():
        before = model(x)
    swaps = swap_modules(model)
    assert [(s.path, s.replaced, s.op) for s in swaps] == [("norm", "RMSNorm", "rms_norm"),
                                                            ("mlp", "GatedMLP", "silu_and_mul")]
    assert isinstance(model.norm, QcoRMSNorm) and isinstance(model.mlp, QcoGatedMLP)
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, rtol=1e-5, atol=1e-5)
    graph = str(torch.export.export(model, (x,)).graph)
    assert "qco_llm.rms_norm" in graph and "qco_llm.silu_and_mul" in graph


def test_a_disabled_op_stays_native():
    model = Block()
    swaps = swap_modules(model, "all,-rms_norm")
    assert [s.op for s in swaps] == ["silu_and_mul"]
    assert type(model.norm) is torch.nn.RMSNorm


@pytest.mark.parametrize("act, approximate", [(torch.nn.GELU(), "none"), (torch.nn.GELU("tanh"), "tanh")])
def test_gelu_mlps_get_the_matching_approximation(act, approximate):
    model = Block(act)
    (swap,) = [s for s in swap_modules(model, "none,+gelu_and_mul")]
    assert swap.op == "gelu_and_mul" and model.mlp.approximate == approximate


def test_an_unknown_activation_stays_native():
    model = Block(torch.nn.ReLU())
    assert [s.op for s in swap_modules(model)] == ["rms_norm"]
    assert isinstance(model.mlp, GatedMLP)


def test_an_rmsnorm_named_module_that_computes_something_else_stays_native_with_a_warning():
    class MeanRMSNorm(torch.nn.Module):  # normalizes by the mean absolute value, not the RMS
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.full((16,), 0.5))
            self.eps = 1e-6

        def forward(self, x):
            return x / (x.abs().mean(-1, keepdim=True) + self.eps) * self.weight

    model = torch.nn.Sequential(MeanRMSNorm())
    with pytest.warns(SwapWarning, match=r"0 \(MeanRMSNorm\) looks like rms_norm but differs"):
        assert swap_modules(model) == []
    assert isinstance(model[0], MeanRMSNorm)


class FixedEpsRMSNorm(torch.nn.Module):
    """An RMSNorm that keeps no eps attribute: its eps is written into forward."""

    def __init__(self, eps: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, 16))
        self.fixed = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.fixed) * self.weight


def test_an_rmsnorm_without_an_eps_attribute_gets_qefficients_default_eps_if_it_computes_with_it():
    model = torch.nn.Sequential(FixedEpsRMSNorm(1e-5))
    assert [s.op for s in swap_modules(model)] == ["rms_norm"]
    assert model[0].eps == 1e-5
    x = torch.randn(3, 16) * 1e-3  # small enough that eps shows
    torch.testing.assert_close(model(x), FixedEpsRMSNorm(1e-5)(x))
    other = torch.nn.Sequential(FixedEpsRMSNorm(0.1))
    with pytest.warns(SwapWarning, match=r"0 \(FixedEpsRMSNorm\) looks like rms_norm but differs"):
        assert swap_modules(other) == []


transformers = pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_llama_and_qwen_modules_are_swapped(family):
    """Their RMSNorm (weight + variance_epsilon) and MLP (gate/up/down, act_fn) classes."""
    models = {"llama": transformers.models.llama.modeling_llama, "qwen2": transformers.models.qwen2.modeling_qwen2}
    module = models[family]
    config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[family]
    config = config_class(hidden_size=32, intermediate_size=48, rms_norm_eps=1e-5, hidden_act="silu")
    prefix = {"llama": "Llama", "qwen2": "Qwen2"}[family]
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"norm": getattr(module, f"{prefix}RMSNorm")(32, eps=1e-5),
                                 "mlp": getattr(module, f"{prefix}MLP")(config)})
    with torch.no_grad():
        model["norm"].weight.uniform_(0.5, 1.5)
    x = seeded_input(2, 3, 32)
    with torch.no_grad():
        before = model["mlp"](model["norm"](x))
    swaps = swap_modules(model)
    assert [(s.replaced, s.op) for s in swaps] == [(f"{prefix}RMSNorm", "rms_norm"), (f"{prefix}MLP", "silu_and_mul")]
    with torch.no_grad():
        torch.testing.assert_close(model["mlp"](model["norm"](x)), before, rtol=1e-5, atol=1e-5)


def test_gemmas_offset_rmsnorm_is_rms_norm_over_one_plus_weight_and_its_tanh_mlp_is_swapped():
    gemma = transformers.models.gemma.modeling_gemma
    config = transformers.GemmaConfig(hidden_size=32, intermediate_size=48, hidden_act="gelu_pytorch_tanh")
    model = torch.nn.ModuleDict({"norm": gemma.GemmaRMSNorm(32), "mlp": gemma.GemmaMLP(config)})
    with torch.no_grad():
        model["norm"].weight.uniform_(-0.5, 0.5)
    x = seeded_input(2, 3, 32)
    with torch.no_grad():
        before = model["mlp"](model["norm"](x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SwapWarning)
        swaps = swap_modules(model)
    assert [(s.replaced, s.op) for s in swaps] == [("GemmaRMSNorm", "rms_norm"), ("GemmaMLP", "gelu_and_mul")]
    assert model["mlp"].approximate == "tanh"
    with torch.no_grad():
        torch.testing.assert_close(model["mlp"](model["norm"](x)), before, rtol=1e-5, atol=1e-5)


def test_phi3s_fused_gate_up_mlp_is_swapped_keeping_its_projection():
    phi3 = transformers.models.phi3.modeling_phi3
    config = transformers.Phi3Config(hidden_size=32, intermediate_size=48, hidden_act="silu")
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"mlp": phi3.Phi3MLP(config)})
    fused = model["mlp"].gate_up_proj
    x = seeded_input(2, 3, 32)
    with torch.no_grad():
        before = model["mlp"](x)
    assert [(s.replaced, s.op) for s in swap_modules(model)] == [("Phi3MLP", "silu_and_mul")]
    assert model["mlp"].gate_up_proj is fused
    with torch.no_grad():
        torch.testing.assert_close(model["mlp"](x), before, rtol=1e-5, atol=1e-5)


def test_a_model_on_the_meta_device_is_refused_naming_a_tensor_and_the_fix():
    """Weights not loaded yet (``torch.device("meta")``, ``from_pretrained(device_map="meta")``):
    the probes cannot run, and the error says so once, before anything is replaced."""
    from qnn_custom_ops.errors import ReportedError

    with torch.device("meta"):
        model = Block()
    with pytest.raises(ReportedError, match=r"^swap_modules: norm\.weight is on device meta; .*cpu") as info:
        swap_modules(model)
    assert isinstance(model.norm, torch.nn.RMSNorm) and "\n" not in str(info.value)
