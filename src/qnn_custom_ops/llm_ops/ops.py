"""The LlmOpPackage's ops as torch ops (namespace ``qco_llm``), their binding and the
quantizer overrides a deployment uses.

One small spec per op (QNN type, reference, fake, backward): the torch schemas come from the
OpDef (``define_torch_ops``), so the XML and the torch ops cannot drift apart. Each ``.out`` variant
refuses an ``out`` of another dtype or shape than the result, eagerly and under export.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from ..errors import UsageError
from ..opdef import OpDef, OpPackage, Role, load_package
from ..quantizer import Share
from ..quantizer.annotation import Override
from ..torch_bridge import OpPackageBinding, bind
from ..torch_bridge.autograd import Backward
from ..torch_bridge.define import define_torch_ops, out_arguments, returns_schema, schema_arguments
from .autograd import (
    NO_CACHE_GRADIENT,
    fused_add_rms_norm_backward,
    gelu_and_mul_backward,
    rms_norm_backward,
    rope_backward,
    silu_and_mul_backward,
)
from .reference import (
    ctx_gather,
    ctx_gather_cb,
    ctx_gather_shape,
    ctx_scatter,
    ctx_scatter_cb,
    ctx_scatter_shape,
    fused_add_rms_norm,
    fused_add_rms_norm_shape,
    gated_shape,
    gelu_and_mul,
    gelu_and_mul_shape,
    require_out_like,
    rms_norm,
    rms_norm_shape,
    rope,
    rope_shape,
    silu_and_mul,
)

NAMESPACE = "qco_llm"
PACKAGE_NAME = "LlmOpPackage"
_LIBRARIES: list[torch.library.Library] = []  # a Library deregisters its ops when collected


def package_dir() -> Path:
    """``op_packages/LlmOpPackage`` as installed with the package (package data of the wheel;
    in a checkout, the link ``src/qnn_custom_ops/op_packages`` to the repository's)."""
    path = Path(str(resources.files("qnn_custom_ops") / "op_packages" / PACKAGE_NAME))
    if not (path / "config" / f"{PACKAGE_NAME}.xml").is_file():
        raise UsageError(f"{path}: the LlmOpPackage is not there; reinstall qnn-custom-ops (its wheel ships it)")
    return path


Result = torch.Tensor | tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class LlmOp:
    """One op of the library: its QNN type, PyTorch reference, fake (output shapes only) and
    backward (written out, or ``NO_CACHE_GRADIENT``)."""

    qnn_type: str
    reference: Callable[..., Result]
    fake: Callable[..., Result]
    backward: Backward

    @property
    def name(self) -> str:
        return self.reference.__name__


def _like(shape_of: Callable[..., Any]) -> Callable[..., torch.Tensor]:
    """A fake kernel: the shared shape check, then an empty tensor of the first input's dtype."""

    def fake(first: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        return first.new_empty(shape_of(first, *args, **kwargs))

    return fake


def _fused_add_rms_norm_fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> Result:
    shape = fused_add_rms_norm_shape(x, residual, weight)
    return x.new_empty(shape), x.new_empty(shape)


LLM_OPS: tuple[LlmOp, ...] = (
    LlmOp("RmsNorm", rms_norm, _like(lambda x, weight, eps=1e-6: rms_norm_shape(x, weight)), rms_norm_backward),
    LlmOp("FusedAddRmsNorm", fused_add_rms_norm, _fused_add_rms_norm_fake, fused_add_rms_norm_backward),
    LlmOp("SiluAndMul", silu_and_mul, _like(lambda x: gated_shape("silu_and_mul", x)), silu_and_mul_backward),
    LlmOp(
        "GeluAndMul",
        gelu_and_mul,
        _like(lambda x, approximate="none": gelu_and_mul_shape(x, approximate)),
        gelu_and_mul_backward,
    ),
    LlmOp("Rope", rope, _like(lambda x, cos, sin, style="neox": rope_shape(x, cos, sin, style)), rope_backward),
    LlmOp(
        "CtxScatter",
        ctx_scatter,
        _like(
            lambda cache, position_ids, updates, negative="skip": ctx_scatter_shape(
                cache, position_ids, updates, None, "ctx_scatter", negative
            )
        ),
        NO_CACHE_GRADIENT,
    ),
    LlmOp(
        "CtxGather",
        ctx_gather,
        _like(
            lambda cache, ctx_indices, negative="skip": ctx_gather_shape(
                cache, ctx_indices, None, "ctx_gather", negative
            )
        ),
        NO_CACHE_GRADIENT,
    ),
    LlmOp(
        "CtxScatterCb",
        ctx_scatter_cb,
        _like(
            lambda cache, batch_index, position_ids, updates, negative="skip": ctx_scatter_shape(
                cache, position_ids, updates, batch_index, "ctx_scatter_cb", negative
            )
        ),
        NO_CACHE_GRADIENT,
    ),
    LlmOp(
        "CtxGatherCb",
        ctx_gather_cb,
        _like(
            lambda cache, batch_index, ctx_indices, negative="skip": ctx_gather_shape(
                cache, ctx_indices, batch_index, "ctx_gather_cb", negative
            )
        ),
        NO_CACHE_GRADIENT,
    ),
)
OPS_BY_NAME = {op.name: op for op in LLM_OPS}


@functools.cache
def llm_package() -> OpPackage:
    return load_package(package_dir() / "config" / f"{PACKAGE_NAME}.xml")


def _results(result: Result) -> tuple[torch.Tensor, ...]:
    return result if isinstance(result, tuple) else (result,)


def _out_tensors(outputs: int, kwargs: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """The ``.out`` tensors, taken out of ``kwargs``: ``out``, or ``out0, out1, ...``."""
    names = ["out"] if outputs == 1 else [f"out{i}" for i in range(outputs)]
    return tuple(kwargs.pop(name) for name in names)


def _returned(outs: tuple[torch.Tensor, ...]) -> Result:
    return outs[0] if len(outs) == 1 else outs


def _define_checked_out(library: torch.library.Library, op: LlmOp, opdef: OpDef) -> None:
    """``qco_llm::<op>.out`` with the schema ``define_torch_ops`` would give it, whose kernel and
    fake refuse an ``out`` unlike the result (the generic one copies into it: a silent cast or
    broadcast). Defined first, so ``define_torch_ops`` keeps it."""
    outputs = len(opdef.outputs)
    library.define(
        f"{op.name}.out({schema_arguments(opdef)}, *, {out_arguments(outputs)}) -> {returns_schema(outputs, out=True)}"
    )

    def kernel(*args: object, **kwargs: Any) -> Result:
        outs = _out_tensors(outputs, kwargs)
        for out, result in zip(outs, _results(op.reference(*args, **kwargs))):
            require_out_like(op.name, out, result)
            out.copy_(result)
        return _returned(outs)

    def fake(*args: object, **kwargs: Any) -> Result:
        outs = _out_tensors(outputs, kwargs)
        for out, result in zip(outs, _results(op.fake(*args, **kwargs))):
            require_out_like(op.name, out, result)
        return _returned(outs)

    library.impl(f"{op.name}.out", kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{op.name}.out", fake, lib=library)


@functools.cache
def llm_ops() -> dict[str, torch._ops.OpOverload]:
    """``qco_llm::<op>`` (functional, ``.out``, fake, autograd) by torch name, defined once per process."""
    library = torch.library.Library(NAMESPACE, "FRAGMENT")
    _LIBRARIES.append(library)
    for op in LLM_OPS:
        _define_checked_out(library, op, llm_package().ops[op.qnn_type])
    overloads = define_torch_ops(
        llm_package(),
        NAMESPACE,
        {op.qnn_type: op.reference for op in LLM_OPS},
        names={op.qnn_type: op.name for op in LLM_OPS},
        fakes={op.qnn_type: op.fake for op in LLM_OPS},
        backwards={op.qnn_type: op.backward for op in LLM_OPS},
    )
    return {op.name: overloads[op.qnn_type] for op in LLM_OPS}


@functools.cache
def llm_binding() -> OpPackageBinding:
    """The binding of LlmOpPackage to the ``qco_llm`` ops: for ``lower``, ``make_quantizer``,
    ``build_host_library`` and ``compile_spec``."""
    overloads = llm_ops()
    return bind(llm_package(), {op.qnn_type: overloads[op.name] for op in LLM_OPS})


def llm_quant_overrides() -> dict[str, dict[tuple | str, Override]]:
    """The KV cache keeps one encoding: the cache input, the updates and the new cache of a
    scatter (and a gather's rows) share the cache's, so rows move as codes and a cache that
    flows from step to step is never clipped or requantized. Pass to ``make_quantizer``."""
    scatter: dict[tuple | str, Override] = {"updates": Share(Role.INPUT, 0), "out": Share(Role.INPUT, 0)}
    gather: dict[tuple | str, Override] = {"out": Share(Role.INPUT, 0)}
    return {"CtxScatter": scatter, "CtxScatterCb": scatter, "CtxGather": gather, "CtxGatherCb": gather}
