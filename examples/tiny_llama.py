"""A tiny Llama-style decoder on the LLM op library: prefill and decode steps on ExecuTorch,
compared with eager PyTorch, in float and quantized (16a8w by default).

The model is built here with random weights (2 layers, hidden 256, 4 query heads sharing 2
KV heads, RoPE, RMSNorm, a SiLU MLP, a static KV cache written with ctx_scatter), then
``swap_modules`` puts the library's ops in. The host run uses the real ExecuTorch runtime:
standard ops on XNNPACK (float) or the portable kernels (quantized), the custom ops on the
LlmOpPackage kernels, quantized models on the codes as on the HTP.

    .venv/bin/python examples/tiny_llama.py                  # host: float, then 16a8w
    .venv/bin/python examples/tiny_llama.py --quant none     # float only
    .venv/bin/python examples/tiny_llama.py --target qnn --soc SM8650 --device SERIAL --build-folder BUILD
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from example_flow import parse_args, quantize, run_on_target

import torch

import qnn_custom_ops as qco
from qnn_custom_ops.llm_ops import llm_binding, llm_ops, llm_quant_overrides, package_dir, swap_modules
from qnn_custom_ops.quiet import native_noise_filtered
from qnn_custom_ops.runtime import HostRunner, Tolerance, compare_outputs

OPS = llm_ops()


@dataclass(frozen=True)
class Config:
    vocab: int = 256
    hidden: int = 256
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 512
    ctx_len: int = 32
    prefill: int = 8
    decode_steps: int = 3
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class RMSNorm(torch.nn.Module):
    """As Llama's: a weight and a variance_epsilon (swap_modules recognises the shape)."""

    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight


class MLP(torch.nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.gate_proj = torch.nn.Linear(config.hidden, config.intermediate, bias=False)
        self.up_proj = torch.nn.Linear(config.hidden, config.intermediate, bias=False)
        self.down_proj = torch.nn.Linear(config.intermediate, config.hidden, bias=False)
        self.act_fn = torch.nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Attention(torch.nn.Module):
    """Grouped-query attention over a static cache [1, kv_heads, ctx_len, head_dim]."""

    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        d = config.head_dim
        self.q_proj = torch.nn.Linear(config.hidden, config.heads * d, bias=False)
        self.k_proj = torch.nn.Linear(config.hidden, config.kv_heads * d, bias=False)
        self.v_proj = torch.nn.Linear(config.hidden, config.kv_heads * d, bias=False)
        self.o_proj = torch.nn.Linear(config.heads * d, config.hidden, bias=False)

    def heads(self, x, count):
        return x.view(1, -1, count, self.config.head_dim).transpose(1, 2)

    def repeat_kv(self, cache, group):
        """Each KV head serves ``group`` query heads (expand + reshape: views a quantizer knows)."""
        batch, kv_heads, ctx_len, head_dim = cache.shape
        return cache[:, :, None].expand(batch, kv_heads, group, ctx_len, head_dim).reshape(
            batch, kv_heads * group, ctx_len, head_dim)

    def forward(self, x, cos, sin, position_ids, mask, k_cache, v_cache):
        c = self.config
        q = OPS["rope"](self.heads(self.q_proj(x), c.heads), cos, sin)
        k = OPS["rope"](self.heads(self.k_proj(x), c.kv_heads), cos, sin)
        k_cache = OPS["ctx_scatter"](k_cache, position_ids, k)
        v_cache = OPS["ctx_scatter"](v_cache, position_ids, self.heads(self.v_proj(x), c.kv_heads))
        group = c.heads // c.kv_heads
        keys, values = self.repeat_kv(k_cache, group), self.repeat_kv(v_cache, group)
        scores = q @ keys.transpose(-1, -2) * (1.0 / math.sqrt(c.head_dim)) + mask
        out = torch.softmax(scores, dim=-1) @ values
        return self.o_proj(out.transpose(1, 2).reshape(1, -1, c.heads * c.head_dim)), k_cache, v_cache


class Layer(torch.nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, position_ids, mask, k_cache, v_cache):
        attended, k_cache, v_cache = self.self_attn(self.input_layernorm(x), cos, sin, position_ids, mask,
                                                    k_cache, v_cache)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), k_cache, v_cache


class TinyLlama(torch.nn.Module):
    """forward(tokens [1, seq] int32, position_ids [1, seq] int32, k_caches, v_caches) ->
    (logits [1, seq, vocab], new k_caches, new v_caches); one program per seq length."""

    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        self.embed_tokens = torch.nn.Embedding(config.vocab, config.hidden)
        self.layers = torch.nn.ModuleList(Layer(config) for _ in range(config.layers))
        self.norm = RMSNorm(config.hidden)
        self.lm_head = torch.nn.Linear(config.hidden, config.vocab, bias=False)
        inv_freq = 1.0 / config.rope_theta ** (torch.arange(0, config.head_dim, 2).float() / config.head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("key_positions", torch.arange(config.ctx_len, dtype=torch.int32), persistent=False)

    def forward(self, tokens, position_ids, k_caches, v_caches):
        angles = position_ids[0].float()[:, None] * self.inv_freq[None, :]  # [seq, head_dim / 2]
        cos, sin = torch.cos(angles), torch.sin(angles)
        # A key is visible to a query at or after its position; hidden ones are pushed 40 below
        # (exp(-40) is nothing to softmax) instead of -inf, which a quantizer cannot observe.
        visible = self.key_positions[None, :] <= position_ids[0][:, None]
        mask = (visible.float() - 1.0) * 40.0
        x = self.embed_tokens(tokens)
        new_k, new_v = [], []
        for layer, k_cache, v_cache in zip(self.layers, k_caches, v_caches):
            x, k_cache, v_cache = layer(x, cos, sin, position_ids, mask, k_cache, v_cache)
            new_k.append(k_cache)
            new_v.append(v_cache)
        return self.lm_head(self.norm(x)), tuple(new_k), tuple(new_v)


def build_model(config: Config) -> TinyLlama:
    """Random weights (seeded), RMSNorm gains away from 1 so the norm is not an identity."""
    torch.manual_seed(0)
    model = TinyLlama(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "norm.weight":
                parameter.uniform_(0.5, 1.5)
    return model


def empty_caches(config: Config) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    shape = (1, config.kv_heads, config.ctx_len, config.head_dim)
    return tuple(torch.zeros(shape) for _ in range(config.layers)), tuple(torch.zeros(shape) for _ in range(config.layers))


def step_inputs(tokens: torch.Tensor, start: int, caches) -> tuple:
    positions = torch.arange(start, start + tokens.shape[1], dtype=torch.int32)[None, :]
    return (tokens.to(torch.int32), positions, *caches)


def flat(outputs) -> list[torch.Tensor]:
    logits, k_caches, v_caches = outputs
    return [logits, *k_caches, *v_caches]


def unflat(tensors, layers: int):
    return tensors[0], tuple(tensors[1:1 + layers]), tuple(tensors[1 + layers:])


@dataclass
class Phase:
    """One program (prefill or decode) lowered for a target, and its PyTorch reference."""

    name: str
    reference: torch.nn.Module
    program: object


def lower_phase(name: str, model: torch.nn.Module, samples: list[tuple], quant: str, args) -> Phase:
    binding = llm_binding()
    if quant == "none":
        reference = model
    else:
        reference = quantize(model, samples, binding, quant, overrides=llm_quant_overrides())
    if args.target == "qnn":
        return Phase(name, reference, None)
    return Phase(name, reference, qco.lower(reference, samples[0], binding, target="host"))


def calibration_samples(model: TinyLlama, config: Config, count: int = 4) -> tuple[list[tuple], list[tuple]]:
    """Prefill and decode inputs from random prompts, with caches the float model filled."""
    generator = torch.Generator().manual_seed(1)
    prefill, decode = [], []
    for _ in range(count):
        tokens = torch.randint(0, config.vocab, (1, config.prefill), generator=generator)
        inputs = step_inputs(tokens, 0, empty_caches(config))
        prefill.append(inputs)
        with torch.no_grad():
            _, k_caches, v_caches = model(*inputs)
        next_token = torch.randint(0, config.vocab, (1, 1), generator=generator)
        decode.append(step_inputs(next_token, config.prefill, (k_caches, v_caches)))
    return prefill, decode


def generate(config: Config, phases: dict[str, Phase], runner: HostRunner, eager: TinyLlama, quant: str,
             tolerance: Tolerance) -> bool:
    """Greedy prefill + decode on ExecuTorch; each step compared with the reference model (and
    with float eager) fed the same inputs."""
    tokens = torch.randint(0, config.vocab, (1, config.prefill), generator=torch.Generator().manual_seed(2))
    caches, start, ok = empty_caches(config), 0, True
    for step in range(1 + config.decode_steps):
        phase = phases["prefill" if step == 0 else "decode"]
        inputs = step_inputs(tokens, start, caches)
        tokens_in, positions, k_caches, v_caches = inputs
        outputs = runner.run(phase.program.buffer, [(tokens_in, positions, *k_caches, *v_caches)])[0]
        with torch.no_grad():
            reference, float_eager = flat(phase.reference(*inputs)), flat(eager(*inputs))
        encodings = phase.program.output_encodings
        report = compare_outputs(outputs[:1], reference[:1], tolerance, encodings=encodings[:1])[0]
        against_eager = compare_outputs(outputs[:1], float_eager[:1], Tolerance(atol=float("inf")))[0]
        caches = compare_outputs(outputs[1:], reference[1:], tolerance, encodings=encodings[1:])
        ok = ok and report.passed and all(r.passed for r in caches)
        label = f"{phase.name} {quant} step {step} ({tokens.shape[1]} token{'s' * (tokens.shape[1] > 1)})"
        print(f"  {label}: logits vs reference: {report}")
        print(f"  {' ' * len(label)}  logits vs float eager: {against_eager}")
        worst = max(caches, key=lambda r: r.max_abs if r.scale is None else r.steps)
        print(f"  {' ' * len(label)}  worst KV cache vs reference: {worst}")
        logits, k_caches, v_caches = unflat(outputs, config.layers)
        caches, start = (k_caches, v_caches), start + tokens.shape[1]
        tokens = logits[:, -1:].argmax(-1)
    return ok


def run_host(config: Config, args, quants: list[str]) -> bool:
    eager = build_model(config)
    model = build_model(config)
    swaps = swap_modules(model)
    print(f"swapped {len(swaps)} modules: " + ", ".join(sorted({f'{s.replaced} -> qco_llm::{s.op}' for s in swaps})))
    library = qco.build_host_library(package_dir(), llm_binding())
    runner = HostRunner([library])
    prefill_samples, decode_samples = calibration_samples(eager, config)
    ok = True
    for quant in quants:
        phases = {"prefill": lower_phase("prefill", model, prefill_samples, quant, args),
                  "decode": lower_phase("decode", model, decode_samples, quant, args)}
        # float: the kernels against eager. Quantized: within 4 steps of the converted model, or
        # 60 dB above its noise: a one-step rounding difference inside the network can grow by a
        # few steps through the 8-bit weights of the next layer (the ops alone agree within one).
        tolerance = Tolerance(atol=1e-4) if quant == "none" else Tolerance(atol=0, lsb=4, min_sqnr_db=60)
        with native_noise_filtered(args.verbose):
            ok = generate(config, phases, runner, eager, quant, tolerance) and ok
    return ok


def run_qnn(config: Config, args) -> bool:
    model = build_model(config)
    swap_modules(model)
    prefill_samples, _ = calibration_samples(build_model(config), config)
    reference = quantize(model, prefill_samples, llm_binding(), args.quant, overrides=llm_quant_overrides())
    outputs, _ = run_on_target(args, "tiny_llama_prefill", llm_binding(), package_dir(), reference,
                               prefill_samples[0])
    print(f"prefill on the device: logits {tuple(outputs[0].shape)}")
    return True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__.splitlines()[0], argv, default_quant="16a8w")
    config = Config()
    if args.target == "qnn":
        return 0 if run_qnn(config, args) else 1
    quants = ["none"] if args.quant == "none" else ["none", args.quant]
    ok = run_host(config, args, quants)
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
