"""Backward formulas for custom ops, through ``torch.library.register_autograd``.

An op ``define_torch_ops`` defines gets one autograd kernel, registered once, that looks its
rule up here when it runs: so ``register_backward`` can give or replace a backward later
without a second registration (torch would warn and override). A rule is a backward the user
or the library writes, one derived from the op's PyTorch reference (``derived_backward``), or
a refusal (``NoGradient``): whichever it is, ``backward`` reaching an op without a way to a
gradient raises one line naming the op and the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ReportedError
from .op_name import OperatorName

Backward = Callable[..., Any]
"""``backward(ctx, *grads)``: one gradient per output in, one per input out (None for an input
without one: an OpDef parameter, an index tensor)."""
SetupContext = Callable[..., None]
"""``setup_context(ctx, inputs, output)``: saves on ``ctx`` what ``backward`` needs."""


class BackwardError(ReportedError, RuntimeError):
    """``backward`` reached an op without a gradient, or a backward that broke its contract."""


@dataclass(frozen=True)
class BackwardRule:
    """How one op differentiates: ``setup_context`` runs with the forward, ``backward`` later."""

    backward: Backward
    setup_context: SetupContext


_RULES: dict[str, BackwardRule] = {}  # by qualified op name: what each installed kernel asks
_LIBRARIES: list[torch.library.Library] = []  # a Library deregisters its kernels when collected


def save_call(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """The default ``setup_context``: every tensor input and output saved for backward (through
    ``save_for_backward``, so torch checks they were not changed in place since), the rest kept
    as they are; ``backward`` then finds them as ``ctx.inputs`` and ``ctx.output``."""
    outputs = output if isinstance(output, tuple) else (output,)
    values = (*inputs, *outputs)
    ctx.save_for_backward(*(value for value in values if isinstance(value, torch.Tensor)))
    ctx.call_layout = (tuple(None if isinstance(v, torch.Tensor) else v for v in values), len(inputs), output)


def restore_call(ctx: Any) -> None:
    """Set ``ctx.inputs`` and ``ctx.output`` from what ``save_call`` kept."""
    layout, count, output = ctx.call_layout
    saved = iter(ctx.saved_tensors)
    values = tuple(next(saved) if kept is None else kept for kept in layout)
    ctx.inputs = values[:count]
    ctx.output = values[count] if not isinstance(output, tuple) else values[count:]


def _restoring(backward: Backward) -> Backward:
    def with_call(ctx: Any, *grads: torch.Tensor) -> Any:
        restore_call(ctx)
        return backward(ctx, *grads)

    return with_call


def rule_of(backward: Backward, setup_context: SetupContext | None = None) -> BackwardRule:
    """A rule from a backward and its ``setup_context``; without one, ``save_call`` saves the
    call and ``backward`` reads ``ctx.inputs`` and ``ctx.output``."""
    if setup_context is not None:
        return BackwardRule(backward, setup_context)
    return BackwardRule(_restoring(backward), save_call)


@dataclass(frozen=True)
class NoGradient:
    """A backward that refuses, for an op nothing should train through: raises one line naming
    the op, why it has no gradient and ``fix``. Never reached unless an input requires grad."""

    why: str
    fix: str

    def __call__(self, ctx: Any, *grads: torch.Tensor) -> Any:
        raise BackwardError(f"{ctx.operator.qualified} has no gradient ({self.why}): {self.fix}")


def _gradients(name: str, arguments: Sequence[str], passed: int, result: Any) -> tuple[Any, ...]:
    """A backward's result, one gradient per input, as torch takes it: for the ``passed`` inputs
    only (the dispatcher drops trailing arguments equal to their defaults); or one line saying
    what it should be."""
    gradients = result if isinstance(result, tuple) else (result,)
    if len(gradients) != len(arguments):
        raise BackwardError(
            f"{name}: its backward returned {len(gradients)} gradient(s), expected {len(arguments)}, "
            f"one per input ({', '.join(arguments)}): return None for an input without one"
        )
    return gradients[:passed]


def install_backward(overload: torch._ops.OpOverload, rule: BackwardRule, lib: torch.library.Library) -> None:
    """Register the autograd kernel of ``overload`` once; it runs whatever rule ``_RULES`` holds.
    ``ctx.operator`` (an ``OperatorName``) names the op to the rule's messages."""
    operator = OperatorName.of(overload)
    name = operator.qualified
    arguments = [argument.name for argument in overload._schema.arguments if not argument.kwarg_only]
    _RULES[name] = rule

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any, keyword_only_inputs: Any = None) -> None:
        ctx.operator = operator
        ctx.rule = _RULES[name]  # the rule of this call, should it be replaced before backward
        ctx.rule.setup_context(ctx, inputs, output)

    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        passed = len(ctx.needs_input_grad)  # as ctx.inputs, one per input: defaults need none
        ctx.needs_input_grad = (*ctx.needs_input_grad, *[False] * (len(arguments) - passed))
        return _gradients(name, arguments, passed, ctx.rule.backward(ctx, *grads))

    torch.library.register_autograd(name, backward, setup_context=setup_context, lib=lib)


def register_backward(
    op: torch._ops.OpOverload,
    backward: Backward,
    /,
    *,
    setup_context: SetupContext | None = None,
) -> None:
    """Give ``op`` a backward, so ``torch.autograd`` (and ``torch.compile``, ``torch.export``
    of a training graph) can differentiate through it.

    ``backward(ctx, *grads)`` runs during the backward pass: ``grads`` holds one gradient per
    output of the op; it returns one gradient per input, in the schema's order (a single tensor
    for a one-input op), None for an input without one (an int, an index tensor, an input that
    does not need it: ``ctx.needs_input_grad[i]`` says). Without ``setup_context``, the op's
    inputs and output(s) are saved for you and ``backward`` reads them as ``ctx.inputs`` and
    ``ctx.output``; with it, ``setup_context(ctx, inputs, output)`` saves what ``backward``
    needs, as in ``torch.library.register_autograd``. Both must be traceable (torch ops only, no
    ``.item()``, no ``data_ptr``) for ``torch.compile`` and ``torch.export``.

    An op ``define_torch_ops`` defined starts with a backward derived from its reference
    (see ``derived_backward``): this replaces it for the calls made from now on. Any other
    functional op (the ``torch.ops.ns.op.default`` of a ``torch.library.custom_op`` or a
    ``Library.define``) gets an autograd kernel; registering again replaces its backward.

    Example::

        >>> mul3 = qco.define_torch_ops(package, "my_ops", {"ExampleCustomOp": lambda input: input * 3},
        ...                             names={"ExampleCustomOp": "mul3"})["ExampleCustomOp"]
        >>> qco.register_backward(mul3, lambda ctx, grad: grad * 3)
        >>> x = torch.randn(1, 2, 2, 3, requires_grad=True)
        >>> mul3(x).sum().backward()
        >>> assert torch.equal(x.grad, torch.full_like(x, 3))
    """
    name = OperatorName.of(op).qualified
    rule = rule_of(backward, setup_context)
    if name in _RULES:
        _RULES[name] = rule
        return
    library = torch.library.Library(OperatorName.of(op).namespace, "FRAGMENT")
    _LIBRARIES.append(library)
    install_backward(op, rule, library)


def _differentiable(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())


def _underivable(ctx: Any, why: str) -> BackwardError:
    return BackwardError(
        f"{ctx.operator.qualified} has no gradient derived from its reference ({why}): "
        f"give it a backward, qco.register_backward({ctx.operator.python}, backward)"
    )


def derived_backward(reference: Callable[..., Any]) -> Backward:
    """A backward derived from the op's PyTorch reference: backward runs the reference again
    under autograd, on the saved inputs, and takes its vector-Jacobian product.

    What it costs: the forward keeps only the op's inputs and outputs (not the reference's
    intermediates); each backward runs the reference once more, then autograd's backward through
    it: the work of autograd through the reference plus one forward. A reference autograd cannot
    differentiate (numpy, ctypes, integer math) says so, naming the op, when backward reaches it.
    """

    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        wanted = [i for i, x in enumerate(ctx.inputs) if ctx.needs_input_grad[i] and _differentiable(x)]
        inputs = [x.detach().requires_grad_(True) if i in wanted else x for i, x in enumerate(ctx.inputs)]
        with torch.enable_grad():
            try:
                result = reference(*inputs)
            except RuntimeError as error:
                raise _underivable(ctx, f"it failed under autograd: {str(error).splitlines()[0]}") from error
            outputs = result if isinstance(result, tuple) else (result,)
            pairs = [(o, g) for o, g in zip(outputs, grads) if isinstance(o, torch.Tensor) and o.requires_grad]
            if not pairs:
                raise _underivable(ctx, "its outputs do not depend on its inputs through torch ops")
            found = torch.autograd.grad(
                [o for o, _ in pairs], [inputs[i] for i in wanted], [g for _, g in pairs], allow_unused=True
            )
        gradients = dict(zip(wanted, found))
        return tuple(gradients.get(i) for i in range(len(inputs)))

    return backward
