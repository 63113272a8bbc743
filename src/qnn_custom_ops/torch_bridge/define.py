"""OpDef -> torch ops, for users who start from XML: functional op, ``.out`` variant, fake kernel,
autograd kernel."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..errors import UsageError
from ..opdef import Datatype, OpDef, OpPackage, TensorDef
from .autograd import Backward, derived_backward, install_backward, rule_of
from .op_name import OperatorName

_LIBRARIES: list[torch.library.Library] = []  # a Library deregisters its ops when collected


def torch_name_for(qnn_type: str) -> str:
    """``FusedRmsNorm`` -> ``fused_rms_norm``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", qnn_type).lower()


def _param_type(tensor: TensorDef) -> str:
    if tensor.is_enum:
        base = "str"
    elif all(d is Datatype.BOOL_8 for d in tensor.datatypes):
        base = "bool"
    elif all(d.is_integer for d in tensor.datatypes):
        base = "int"
    elif all(d.is_float for d in tensor.datatypes):
        base = "float"
    else:
        raise UsageError(
            f"param '{tensor.name}' has datatypes {', '.join(d.short_name for d in tensor.datatypes)}, "
            "which map to no single torch type (use integer, float or BOOL_8 datatypes)"
        )
    if tensor.shape.rank == 1 and base in ("int", "float"):
        base += "[]"
    return base


def _default(tensor: TensorDef) -> str:
    if tensor.mandatory:
        return ""
    value = tensor.default.value if tensor.default is not None else None
    if value is None:
        return "=None"
    if tensor.is_enum and isinstance(value, int):  # an Enum's default is the index of its value
        return f'="{tensor.enum_values[value]}"'
    if isinstance(value, bool):
        return f"={value}"
    if isinstance(value, tuple):
        return "=[" + ",".join(repr(v) for v in value) + "]"
    return f"={value!r}"


def schema_arguments(op: OpDef) -> str:
    """The argument list of the functional schema derived from the OpDef."""
    args = [f"Tensor{'' if t.mandatory else '?'} {t.c_name}" for t in op.inputs]
    for param in op.params:
        optional = "?" if not param.mandatory and _default(param) == "=None" else ""
        args.append(f"{_param_type(param)}{optional} {param.c_name}{_default(param)}")
    return ", ".join(args)


def returns_schema(outputs: int, out: bool) -> str:
    """The return type of a schema with ``outputs`` tensors; aliased to the outs for ``.out``."""
    if outputs == 1:
        return "Tensor(a!)" if out else "Tensor"
    aliases = [f"Tensor({chr(ord('a') + i)}!)" if out else "Tensor" for i in range(outputs)]
    return "(" + ", ".join(aliases) + ")"


def out_arguments(outputs: int) -> str:
    """The keyword-only output arguments of an ``.out`` variant: ``out``, or ``out0, out1, ...``."""
    if outputs == 1:
        return "Tensor(a!) out"
    return ", ".join(f"Tensor({chr(ord('a') + i)}!) out{i}" for i in range(outputs))


def define_torch_ops(
    package: OpPackage,
    namespace: str,
    impls: Mapping[str, Callable[..., Any]],
    *,
    names: Mapping[str, str] | None = None,
    fakes: Mapping[str, Callable[..., Any]] | None = None,
    backwards: Mapping[str, Backward] | None = None,
) -> dict[str, torch._ops.OpOverload]:
    """Define ``namespace::<op>`` (and ``.out``) for each QNN op type in ``impls``.

    ``impls`` maps a QNN op type to its Python reference implementation; the torch name is
    ``names[qnn_type]`` or the snake_case of the type. The fake kernel is ``fakes[qnn_type]``
    or the reference itself (which must then use torch ops only). The backward is
    ``backwards[qnn_type]`` (``backward(ctx, *grads)`` reading ``ctx.inputs``, as
    ``register_backward`` takes it) or derived from the reference (``derived_backward``).
    Returns the functional overloads by QNN op type, ready for ``bind``.
    """
    names = names or {}
    fakes = fakes or {}
    backwards = backwards or {}
    unknown = [t for t in impls if t not in package.ops]
    if unknown:
        raise UsageError(f"{', '.join(unknown)}: not an op of {package.name} (ops: {', '.join(package.ops)})")
    library = torch.library.Library(namespace, "FRAGMENT")
    _LIBRARIES.append(library)
    overloads = {}
    for qnn_type, impl in impls.items():
        op = package.ops[qnn_type]
        name = names.get(qnn_type, torch_name_for(qnn_type))
        backward = backwards.get(qnn_type, derived_backward(impl))
        overloads[qnn_type] = _define(library, namespace, name, op, impl, fakes.get(qnn_type, impl), backward)
    return overloads


def _define(
    library: torch.library.Library,
    namespace: str,
    name: str,
    op: OpDef,
    impl: Callable[..., Any],
    fake: Callable[..., Any],
    backward: Backward,
) -> torch._ops.OpOverload:
    outputs = len(op.outputs)
    functional = f"{name}({schema_arguments(op)}) -> {returns_schema(outputs, out=False)}"
    existing = getattr(getattr(torch.ops, namespace), name, None) if hasattr(torch.ops, namespace) else None
    if existing is not None and hasattr(existing, "default"):
        if str(existing.default._schema) != f"{namespace}::{functional}":
            raise UsageError(
                f"{namespace}::{name} is already defined as {existing.default._schema}, "
                f"not {namespace}::{functional}: pick another namespace or name"
            )
        return existing.default
    library.define(functional)
    library.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{namespace}::{name}", fake, lib=library)
    overload = getattr(getattr(torch.ops, namespace), name).default
    install_backward(overload, rule_of(backward), library)
    register_out_variant(overload)
    return overload


def has_out_variant(overload: torch._ops.OpOverload) -> bool:
    """True if ``ns::op`` has the ``.out`` overload ``to_executorch`` needs."""
    return "out" in OperatorName.of(overload).packet().overloads()


def register_out_variant(overload: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """Define ``ns::op.out`` for an existing functional op (a ``torch.library.custom_op``,
    say): the same arguments plus keyword-only ``out`` tensors; it runs the op and copies
    into them. ``to_executorch`` and the host kernel library need it. Returns it."""
    operator = OperatorName.of(overload)
    namespace, name = operator.namespace, operator.name
    packet = operator.packet()
    if "out" in packet.overloads():
        return packet.out
    arguments, has_kwarg_only = schema_argument_text(overload._schema)
    outputs = len(overload._schema.returns)
    star = "" if has_kwarg_only else "*, "
    library = torch.library.Library(namespace, "FRAGMENT")
    _LIBRARIES.append(library)
    library.define(f"{name}.out({arguments}, {star}{out_arguments(outputs)}) -> {returns_schema(outputs, out=True)}")
    library.impl(f"{name}.out", out_kernel_of(overload, outputs), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{namespace}::{name}.out", out_fake_of(outputs), lib=library)
    return packet.out


def schema_argument_text(schema: Any) -> tuple[str, bool]:
    """The argument list of ``schema`` as text, and whether it has keyword-only arguments."""
    text = str(schema)
    return text[text.index("(") + 1 : text.rindex(") ->")], any(arg.kwarg_only for arg in schema.arguments)


def out_kernel_of(impl: Callable[..., Any], outputs: int) -> Callable[..., Any]:
    """The ``.out`` kernel: run the reference, copy into the caller's tensors."""

    def out_kernel(*args: Any, **kwargs: Any) -> Any:
        outs = [kwargs.pop("out")] if outputs == 1 else [kwargs.pop(f"out{i}") for i in range(outputs)]
        results = impl(*args, **kwargs)
        results = (results,) if outputs == 1 else tuple(results)
        for out, result in zip(outs, results):
            out.copy_(result)
        return outs[0] if outputs == 1 else tuple(outs)

    return out_kernel


def out_fake_of(outputs: int) -> Callable[..., Any]:
    def out_fake(*args: Any, **kwargs: Any) -> Any:
        return kwargs["out"] if outputs == 1 else tuple(kwargs[f"out{i}"] for i in range(outputs))

    return out_fake
