"""Put the library's ops into a model, QEfficient style: modules are replaced in place.

What is swapped is decided by what a module computes, not only by its class: a candidate
(``torch.nn.RMSNorm``, a ``*RMSNorm`` with a 1-D ``weight`` and ``eps``/``variance_epsilon`` or
QEfficient's default eps, 1e-5, when it keeps none; a
gated MLP with ``gate_proj``/``up_proj`` or Phi-3's fused ``gate_up_proj``, ``down_proj`` and an
``act_fn``/``activation_fn``) is run once on a probe input beside its replacement. Gemma's
``x̂ * (1 + weight)`` norm becomes ``rms_norm`` over ``1 + weight`` (folded once into the weight
the op multiplies by); a module that matches nothing (an unknown activation, another norm)
stays native and a warning says why. ``select`` reads like vLLM's ``custom_ops``: ``"all"``,
``"none"``, ``"all,-rms_norm"``, ``"none,+silu_and_mul"``; without ``all``/``none``, names mean
exactly those ops (``"rms_norm"``) and ``-name``s alone all but those.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import ReportedError, UsageError
from .ops import llm_ops

SWAPPABLE = ("rms_norm", "silu_and_mul", "gelu_and_mul")
#: The eps of a ``*RMSNorm`` that keeps none in ``eps``/``variance_epsilon``: QEfficient's
#: default (its ``CustomRMSNorm``); the probe still checks the module computes with it.
DEFAULT_RMS_NORM_EPS = 1e-5
_PROBE_ROWS = 4


class SelectError(UsageError):
    """A ``select`` string names an op the library cannot swap in, or contradicts itself."""


class SelectTypeError(ReportedError, TypeError):
    """``select`` is not a string."""


class SwapDeviceError(ReportedError, ValueError):
    """A model whose tensors are not on the CPU (meta: weights not loaded yet), where the probes run."""


class SwapWarning(UserWarning):
    """A module shaped like a swappable one computes something else; it stays native."""


@dataclass(frozen=True)
class Swap:
    """One replaced module: where it was, what it was, which op computes it now."""

    path: str
    replaced: str  # class name of the original module
    op: str  # qco_llm op name


_BASES = ("all", "none")


def _select_error(select: str, problem: str) -> SelectError:
    """The one-line error every bad ``select`` gets: the argument as given, then the problem."""
    return SelectError(f"swap_modules: select={select!r}: {problem}")


def _entry(select: str, entry: str) -> tuple[str, bool]:
    """One ``+name``, ``-name`` or bare ``name`` (enables) as (name, enabled)."""
    if not entry:
        raise _select_error(select, "an empty entry; separate op names by single commas")
    name = entry[1:] if entry[0] in "+-" else entry
    if name[:1] in ("+", "-"):
        bare = name.lstrip("+-")
        raise _select_error(select, f"{entry!r} has more than one sign: write +{bare} or -{bare}")
    if name in _BASES:
        raise _select_error(
            select, f"{entry!r}: all and none take no sign and only come first (the base), as in 'all,-rms_norm'"
        )
    if name not in SWAPPABLE:
        raise _select_error(select, f"unknown op {name!r}; known: {', '.join(SWAPPABLE)}")
    return name, not entry.startswith("-")


def parse_select(select: str) -> frozenset[str]:
    """The ops ``select`` enables, read as vLLM reads ``custom_ops`` (one op both enabled and
    disabled is an error). The base is ``all`` or ``none`` when given first; without one, names
    mean exactly those ops and ``-name``s alone all but those, so ``"rms_norm"`` never swaps more."""
    if not isinstance(select, str):
        raise SelectTypeError(
            f"swap_modules: select must be a comma-separated string such as 'all,-rms_norm', "
            f"got {type(select).__name__} {select!r}: pass ','.join(...) of the entries"
        )
    entries = [entry.strip() for entry in select.split(",")]
    base = entries.pop(0) if entries[0] in _BASES else None
    named = [_entry(select, entry) for entry in entries]
    enable = {name for name, enabled in named if enabled}
    disable = {name for name, enabled in named if not enabled}
    if enable & disable:
        raise _select_error(
            select, f"{', '.join(sorted(enable & disable))} is both enabled and disabled: keep one of them"
        )
    if base is None:
        base = "none" if enable else "all"
    return frozenset((set(SWAPPABLE) if base == "all" else enable) - disable)


class QcoRMSNorm(torch.nn.Module):
    """RMSNorm over the last dimension by ``qco_llm::rms_norm``; shares the original's weight."""

    def __init__(self, weight: torch.Tensor, eps: float):
        super().__init__()
        if isinstance(weight, torch.nn.Parameter):
            self.weight = weight
        else:
            self.register_buffer("weight", weight)
        self.eps = float(eps)
        self.rms_norm = llm_ops()["rms_norm"]  # looked up once: export traces forward, not the registry

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rms_norm(x, self.weight, self.eps)


def _fused(gate_proj: torch.nn.Linear, up_proj: torch.nn.Linear) -> torch.nn.Linear:
    """``gate_proj`` and ``up_proj`` as one ``gate_up_proj`` (vLLM's merged projection), gate
    first: built on the meta device and given the concatenation, so no other copy is made."""
    bias = gate_proj.bias is not None
    fused = torch.nn.Linear(gate_proj.in_features, 2 * gate_proj.out_features, bias=bias, device="meta")
    with torch.no_grad():
        fused.weight = _parameter_like(gate_proj.weight, torch.cat((gate_proj.weight, up_proj.weight)))
        if bias:
            fused.bias = _parameter_like(gate_proj.bias, torch.cat((gate_proj.bias, up_proj.bias)))
    return fused


def _parameter_like(original: torch.Tensor, data: torch.Tensor) -> torch.nn.Parameter:
    return torch.nn.Parameter(data, requires_grad=original.requires_grad)


class QcoGatedMLP(torch.nn.Module):
    """``down_proj(act(gate) * up)`` over one fused ``gate_up_proj`` (gate rows first: Phi-3's
    own, or Llama's ``gate_proj``/``up_proj`` merged), the gated activation op, and the original
    ``down_proj``."""

    gate_up_proj: torch.nn.Linear
    op: str

    def __init__(self, gate_up_proj: torch.nn.Linear, down_proj: torch.nn.Module, op: str, approximate: str | None):
        super().__init__()
        self.gate_up_proj = gate_up_proj
        self.down_proj = down_proj
        self.op = op
        self.approximate = approximate
        self.gated = llm_ops()[op]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fused = self.gate_up_proj(x)
        if self.approximate is None:
            return self.down_proj(self.gated(fused))
        return self.down_proj(self.gated(fused, self.approximate))


def _torch_rms_norm_candidates(module: torch.nn.RMSNorm) -> list[QcoRMSNorm]:
    """``torch.nn.RMSNorm`` over the last dimension: its weight (ones without one) and eps
    (the dtype's epsilon when None, as torch does)."""
    if len(module.normalized_shape) != 1:
        return []
    weight = module.weight if module.weight is not None else torch.ones(module.normalized_shape[0])
    return [QcoRMSNorm(weight, module.eps if module.eps is not None else torch.finfo(weight.dtype).eps)]


def _rms_norm_candidates(module: torch.nn.Module) -> list[QcoRMSNorm]:
    """The replacements an RMSNorm-shaped module may have, before the probe: ``x̂ * weight``
    and, for a named ``*RMSNorm``, Gemma's ``x̂ * (1 + weight)`` with the offset folded into the
    op's weight (computed in float32 as Gemma does, so the op multiplies by the same numbers)."""
    if isinstance(module, torch.nn.RMSNorm):
        return _torch_rms_norm_candidates(module)
    if not type(module).__name__.endswith("RMSNorm"):
        return []
    weight = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    eps = DEFAULT_RMS_NORM_EPS if eps is None else eps
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or not isinstance(eps, (int, float)):
        return []
    offset = (1.0 + weight.detach().float()).to(weight.dtype)
    return [QcoRMSNorm(weight, eps), QcoRMSNorm(offset, eps)]


def _probe(features: int, dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(_PROBE_ROWS, features, generator=generator).to(dtype)


#: Gated activations the probe recognises: (op, approximate argument or None, PyTorch function).
_ACTIVATIONS: tuple[tuple[str, str | None, Callable[[torch.Tensor], torch.Tensor]], ...] = (
    ("silu_and_mul", None, F.silu),
    ("gelu_and_mul", "none", F.gelu),
    ("gelu_and_mul", "tanh", lambda x: F.gelu(x, approximate="tanh")),
)


def _activation_of(act: torch.nn.Module | Callable) -> tuple[str, str | None] | None:
    """Which gated op an ``act_fn`` is, judged by what it computes."""
    x = _probe(64, torch.float32) * 3
    with torch.no_grad():
        y = act(x)
    for op, approximate, function in _ACTIVATIONS:
        if torch.allclose(y, function(x), rtol=1e-5, atol=1e-6):
            return op, approximate
    return None


def _gate_up(module: torch.nn.Module) -> torch.nn.Linear | None:
    """The MLP's gate and up projections as one Linear: Phi-3's ``gate_up_proj`` as it is,
    Llama's ``gate_proj`` and ``up_proj`` merged; None for anything else."""
    fused = getattr(module, "gate_up_proj", None)
    if isinstance(fused, torch.nn.Linear):
        return fused if fused.out_features % 2 == 0 else None
    gate, up = getattr(module, "gate_proj", None), getattr(module, "up_proj", None)
    if not (isinstance(gate, torch.nn.Linear) and isinstance(up, torch.nn.Linear)):
        return None
    if gate.weight.shape != up.weight.shape or (gate.bias is None) != (up.bias is None):
        return None
    return _fused(gate, up)


def _mlp_candidate(module: torch.nn.Module) -> QcoGatedMLP | None:
    down = getattr(module, "down_proj", None)
    act = getattr(module, "act_fn", getattr(module, "activation_fn", None))
    if not (callable(act) and isinstance(down, torch.nn.Module)):
        return None
    activation = _activation_of(act)
    if activation is None:
        return None
    gate_up = _gate_up(module)
    return None if gate_up is None else QcoGatedMLP(gate_up, down, *activation)


def _matches(module: torch.nn.Module, replacement: torch.nn.Module, features: int, dtype: torch.dtype) -> float:
    """The largest difference between the module and its replacement on a probe input."""
    x = _probe(features, dtype)
    with torch.no_grad():
        return float((module(x).float() - replacement(x).float()).abs().max())


def _features(replacement: QcoRMSNorm | QcoGatedMLP) -> tuple[int, torch.dtype]:
    if isinstance(replacement, QcoRMSNorm):
        return replacement.weight.shape[0], replacement.weight.dtype
    return replacement.gate_up_proj.in_features, replacement.gate_up_proj.weight.dtype


def _candidates(module: torch.nn.Module, enabled: frozenset[str]) -> Sequence[QcoRMSNorm | QcoGatedMLP]:
    """What may replace ``module``, most likely first; the probe picks the one that matches."""
    if "rms_norm" in enabled:
        norms = _rms_norm_candidates(module)
        if norms:
            return norms
    mlp = _mlp_candidate(module) if enabled & {"silu_and_mul", "gelu_and_mul"} else None
    return [mlp] if mlp is not None and mlp.op in enabled else []


def _matching(
    module: torch.nn.Module, candidates: Sequence[QcoRMSNorm | QcoGatedMLP]
) -> tuple[QcoRMSNorm | QcoGatedMLP | None, float]:
    """The first candidate computing what ``module`` does on a probe, else None and the
    first one's difference (for the warning)."""
    errors = []
    for candidate in candidates:
        features, dtype = _features(candidate)
        error = _matches(module, candidate, features, dtype)
        if error <= (1e-4 if dtype == torch.float32 else 1e-2):
            return candidate, error
        errors.append(error)
    return None, errors[0]


def _require_cpu(model: torch.nn.Module) -> None:
    """Each candidate is judged by running it on a CPU probe, so every tensor of the model must
    be on the CPU; checked before anything is replaced."""
    for name, tensor in itertools.chain(model.named_parameters(), model.named_buffers()):
        if tensor.device.type != "cpu":
            raise SwapDeviceError(
                f"swap_modules: {name} is on device {tensor.device}; modules are judged on CPU probes: put the "
                "model's weights on the cpu first (model.to('cpu'); a meta model: model.to_empty(device='cpu') "
                "then load_state_dict, or from_pretrained without a meta device_map)"
            )


def swap_modules(model: torch.nn.Module, select: str = "all") -> list[Swap]:
    """Replace the modules of ``model`` that the selected ops compute (in place); returns
    what was replaced. A disabled op's modules stay native, for XNNPACK or QNN's built-ins."""
    enabled = parse_select(select)
    _require_cpu(model)
    swaps: list[Swap] = []
    for path in [name for name, _ in model.named_modules()]:  # names only: a replaced module is freed
        if not path or any(path.startswith(s.path + ".") for s in swaps):
            continue
        module = model.get_submodule(path)
        candidates = _candidates(module, enabled)
        if not candidates:
            continue
        replacement, error = _matching(module, candidates)
        if replacement is None:
            warnings.warn(
                SwapWarning(
                    f"{path} ({type(module).__name__}) looks like {_op_of(candidates[0])} but "
                    f"differs from it by {error:.3g} on a probe input; left native"
                ),
                stacklevel=2,
            )
            continue
        parent_path, _, name = path.rpartition(".")
        setattr(model.get_submodule(parent_path) if parent_path else model, name, replacement)
        swaps.append(Swap(path, type(module).__name__, _op_of(replacement)))
    return swaps


def _op_of(replacement: QcoRMSNorm | QcoGatedMLP) -> str:
    return "rms_norm" if isinstance(replacement, QcoRMSNorm) else replacement.op
