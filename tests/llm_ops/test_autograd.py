"""A backward for every op: the library's written out (gradcheck in float64, equal to autograd
through the references), the shipped example ops' derived from their references, a user's
OpDef op's given with ``register_backward``; models train through them, and a training graph
exports with ``torch.export`` and compiles."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

import qnn_custom_ops as qco
from qnn_custom_ops.llm_ops import llm_ops, llm_package, reference, swap_modules
from qnn_custom_ops.opdef import parse_package

from tests.conftest import REPO, opdef_xml
from tests.llm_ops.test_swap import Block
from tests.torch_ops import MUL3, SPLIT, ConvMul3

NAMESPACE = "qco_autograd_test"


def f64(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def i32(*rows: list[int]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int32)


# op name (the test id's first word) -> its float64 arguments: every shape family the op takes
LIBRARY_CASES = {
    "rms_norm": lambda: (f64(2, 3, 8), f64(8), 1e-6),
    "fused_add_rms_norm": lambda: (f64(2, 3, 8), f64(2, 3, 8), f64(8), 1e-5),
    "silu_and_mul": lambda: (f64(2, 3, 8),),
    "gelu_and_mul": lambda: (f64(2, 3, 8), "none"),
    "gelu_and_mul tanh": lambda: (f64(2, 3, 8), "tanh"),
    "rope partial neox": lambda: (f64(2, 2, 3, 10), f64(3, 4), f64(3, 4), "neox"),
    "rope per-sequence gptj": lambda: (f64(2, 2, 3, 8), f64(2, 3, 4), f64(2, 3, 4), "gptj"),
}


@pytest.mark.parametrize("case", LIBRARY_CASES)
def test_library_backward_passes_gradcheck_and_equals_autograd_through_the_reference(case):
    name = case.split()[0]
    op, args = llm_ops()[name], LIBRARY_CASES[case]()
    assert torch.autograd.gradcheck(op, args)
    tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
    outputs = op(*args)
    seeds = [torch.randn_like(o) for o in (outputs if isinstance(outputs, tuple) else (outputs,))]
    ours = torch.autograd.grad(outputs, tensors, seeds)
    through_reference = torch.autograd.grad(getattr(reference, name)(*args), tensors, seeds)
    for mine, theirs in zip(ours, through_reference):
        torch.testing.assert_close(mine, theirs)


def test_library_gradients_come_in_each_inputs_dtype():
    """bfloat16 activations with a float32 gain, as a mixed-precision model holds them."""
    x = torch.randn(2, 8, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.ones(8, requires_grad=True)
    llm_ops()["rms_norm"](x, weight).float().sum().backward()
    assert (x.grad.dtype, weight.grad.dtype) == (torch.bfloat16, torch.float32)


CACHE_CASES = {
    "ctx_scatter": lambda cache: (cache, i32([1]), torch.ones(1, 2, 1, 3)),
    "ctx_gather": lambda cache: (cache, i32([1, 2])),
    "ctx_scatter_cb": lambda cache: (cache, i32(0), i32([1]), torch.ones(1, 2, 1, 3)),
    "ctx_gather_cb": lambda cache: (cache, i32(0), i32([1, 2])),
}


@pytest.mark.parametrize("name", CACHE_CASES)
def test_cache_ops_say_in_one_line_that_they_have_no_gradient(name):
    cache = torch.zeros(1, 2, 4, 3, requires_grad=True)
    out = llm_ops()[name](*CACHE_CASES[name](cache))
    with pytest.raises(qco.BackwardError, match=rf"^qco_llm::{name} has no gradient \(.*\): train the model") as error:
        out.sum().backward()
    assert "\n" not in str(error.value)
    with torch.no_grad():  # inference never reaches it
        assert not llm_ops()[name](*CACHE_CASES[name](cache)).requires_grad


@pytest.mark.parametrize("op", [MUL3, SPLIT], ids=["mul3", "split_half"])
def test_shipped_example_ops_pass_gradcheck_with_the_backward_derived_from_their_reference(op):
    assert torch.autograd.gradcheck(op, (f64(1, 2, 2, 4),))


DERIVED_RMS_NORM = qco.define_torch_ops(llm_package(), NAMESPACE, {"RmsNorm": reference.rms_norm},
                                        names={"RmsNorm": "rms_norm"})["RmsNorm"]


@pytest.mark.parametrize("eps", [(), (1e-3,)], ids=["eps left to its default", "eps given"])
def test_a_backward_derived_from_a_reference_takes_defaults_and_equals_the_written_one(eps):
    """The dispatcher drops an argument equal to its default: the derived backward still sees
    every input, and returns gradients for the ones passed."""
    args = (f64(2, 3, 8), f64(8), *eps)
    assert torch.autograd.gradcheck(DERIVED_RMS_NORM, args)
    seed = torch.randn(2, 3, 8, dtype=torch.float64)
    derived = torch.autograd.grad(DERIVED_RMS_NORM(*args), args[:2], seed)
    written = torch.autograd.grad(llm_ops()["rms_norm"](*args), args[:2], seed)
    for mine, theirs in zip(derived, written):
        torch.testing.assert_close(mine, theirs)


def _train(model: torch.nn.Module, inputs: torch.Tensor, target: torch.Tensor, steps: int = 30) -> list[float]:
    """Losses of ``steps`` Adam steps on the mean squared error to ``target``."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_a_model_on_an_opdef_op_trains_through_its_derived_backward():
    """conv -> my_ops::mul3 -> softmax learns a teacher's outputs; its gradients are those of
    conv -> * 3 -> softmax."""
    model, teacher = ConvMul3(), ConvMul3()
    inputs = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        target = teacher(inputs)
    loss = torch.nn.functional.mse_loss(model(inputs), target)
    loss.backward()
    weight = model.conv.weight.detach().requires_grad_(True)
    expected = torch.nn.functional.mse_loss(
        torch.softmax(torch.nn.functional.conv2d(inputs, weight, model.conv.bias, padding=1) * 3, dim=-1), target
    )
    (expected_grad,) = torch.autograd.grad(expected, weight)
    torch.testing.assert_close(model.conv.weight.grad, expected_grad)
    losses = _train(model, inputs, target)
    assert losses[-1] < losses[0] / 4, losses


SCALE_ROWS = opdef_xml("""\
    <OpDef>
      <Name>ScaleRows</Name>
      <Input><Name>x</Name><Mandatory>true</Mandatory>
        <Datatype>QNN_DATATYPE_FLOAT_32</Datatype><Shape><Rank>2D</Rank></Shape></Input>
      <Input><Name>weight</Name><Mandatory>true</Mandatory>
        <Datatype>QNN_DATATYPE_FLOAT_32</Datatype><Shape><Rank>1D</Rank></Shape></Input>
      <Output><Name>y</Name><Mandatory>true</Mandatory>
        <Datatype>QNN_DATATYPE_FLOAT_32</Datatype><Shape><Rank>2D</Rank></Shape></Output>
      <SupportedBackend>HTP</SupportedBackend>
    </OpDef>""")
SCALE_PACKAGE = parse_package(SCALE_ROWS.encode(), "scale_rows.xml")


def _scale_rows_op(name: str) -> torch._ops.OpOverload:
    """``x * weight`` computed in numpy, as a reference calling a C library would: autograd
    cannot see through it."""

    def numpy_scale_rows(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(x.detach().numpy() * weight.detach().numpy())

    return qco.define_torch_ops(SCALE_PACKAGE, NAMESPACE, {"ScaleRows": numpy_scale_rows}, names={"ScaleRows": name},
                                fakes={"ScaleRows": lambda x, weight: torch.empty_like(x)})["ScaleRows"]


UNDERIVABLE, GIVEN, MISCOUNTED = (_scale_rows_op(name) for name in ("underivable", "given", "miscounted"))


def scale_rows_backward(ctx, grad):
    x, weight = ctx.inputs
    return grad * weight, (grad * x).sum(0)


qco.register_backward(GIVEN, scale_rows_backward)


def test_an_op_without_a_way_to_a_gradient_says_so_in_one_line_naming_the_op_and_the_fix():
    out = UNDERIVABLE(torch.randn(3, 4), torch.ones(4, requires_grad=True))
    with pytest.raises(qco.BackwardError) as error:
        out.sum().backward()
    assert str(error.value) == (
        f"{NAMESPACE}::underivable has no gradient derived from its reference (its outputs do not depend on its "
        f"inputs through torch ops): give it a backward, qco.register_backward(torch.ops.{NAMESPACE}.underivable"
        ".default, backward)"
    )


def test_a_user_opdef_op_trains_with_the_backward_it_is_given():
    assert torch.autograd.gradcheck(GIVEN, (f64(3, 4), f64(4)))

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4))

        def forward(self, x):
            return GIVEN(x, self.weight)

    inputs = torch.randn(16, 4)
    losses = _train(Scaled(), inputs, inputs * torch.tensor([0.5, -1.0, 2.0, 3.0]))
    assert losses[-1] < losses[0] / 4, losses


def test_a_backward_with_the_wrong_number_of_gradients_names_the_op_and_the_fix():
    qco.register_backward(MISCOUNTED, lambda ctx, grad: grad * ctx.inputs[1])
    with pytest.raises(qco.BackwardError, match=(
        rf"^{NAMESPACE}::miscounted: its backward returned 1 gradient\(s\), expected 2, one per input "
        r"\(x, weight\): return None for an input without one$"
    )):
        MISCOUNTED(torch.randn(3, 4, requires_grad=True), torch.ones(4)).sum().backward()


TORCH_FIRST = torch.library.Library(NAMESPACE, "FRAGMENT")
TORCH_FIRST.define("cube(Tensor x) -> Tensor")
TORCH_FIRST.impl("cube", lambda x: x * x * x, "CompositeExplicitAutograd")


def test_register_backward_gives_a_torch_first_op_a_backward_and_replaces_it_quietly():
    cube = torch.ops.qco_autograd_test.cube.default
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        qco.register_backward(cube, lambda ctx, grad: grad * 0)
        assert not torch.autograd.gradcheck(cube, (f64(5),), raise_exception=False)
        qco.register_backward(cube, lambda ctx, grad: grad * 3 * ctx.inputs[0] ** 2)
        assert torch.autograd.gradcheck(cube, (f64(5),))


def test_a_swapped_block_trains_with_the_gradients_of_the_native_one():
    """torch.nn.RMSNorm and a SiLU gated MLP swapped for qco_llm's ops: the same gradients."""
    native = Block()
    swapped = Block()
    swapped.load_state_dict(native.state_dict())
    assert [s.op for s in swap_modules(swapped)] == ["rms_norm", "silu_and_mul"]
    inputs = torch.randn(4, 16)
    gradients = [torch.autograd.grad(model(inputs).pow(2).mean(), [model.norm.weight, model.mlp.down_proj.weight])
                 for model in (native, swapped)]
    for mine, theirs in zip(*gradients):
        torch.testing.assert_close(mine, theirs)
    losses = _train(swapped, inputs, torch.zeros(4, 16))
    assert losses[-1] < losses[0] / 4, losses


OPS = llm_ops()  # looked up once: torch.compile would trace into llm_ops' first call


class TrainingLoss(torch.nn.Module):
    """rope -> rms_norm -> linear -> silu_and_mul -> mul3 -> the user's scale_rows -> a loss:
    written, derived and given backwards in one graph."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.Parameter(torch.rand(8) + 0.5)
        self.linear = torch.nn.Linear(8, 16)
        self.scale = torch.nn.Parameter(torch.rand(8) + 0.5)
        angles = torch.arange(3.0)[:, None] * torch.rand(4)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def forward(self, x):
        h = OPS["rms_norm"](OPS["rope"](x, self.cos, self.sin), self.norm)
        h = MUL3(OPS["silu_and_mul"](self.linear(h)))
        return GIVEN(h.reshape(-1, 8), self.scale).pow(2).mean()


def _gradients(model: torch.nn.Module, run, inputs: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    run(inputs).backward()
    return {name: parameter.grad for name, parameter in model.named_parameters()}


def test_an_exported_training_graph_keeps_the_ops_and_trains_with_the_eager_gradients():
    model, inputs = TrainingLoss(), torch.randn(1, 2, 3, 8)
    program = torch.export.export(model, (inputs,))
    called = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert {"qco_llm.rope.default", "qco_llm.rms_norm.default", "qco_llm.silu_and_mul.default",
            "my_ops.mul3.default", f"{NAMESPACE}.given.default"} <= called
    exported = program.module()
    eager = _gradients(model, model, inputs)
    for name, gradient in _gradients(exported, exported, inputs).items():
        torch.testing.assert_close(gradient, eager[name], msg=name)


def test_the_joint_forward_backward_graph_exports_with_the_eager_gradients():
    from torch.export.experimental import _export_forward_backward

    model, inputs = TrainingLoss(), torch.randn(1, 2, 3, 8)
    joint = _export_forward_backward(torch.export.export(model, (inputs,)))
    called = {str(n.target) for n in joint.graph.nodes if n.op == "call_function"}
    assert {"qco_llm.rope.default", "qco_llm.rms_norm.default", "my_ops.mul3.default"} <= called
    loss, *gradients = _run_joint(joint, model, inputs)
    eager = _gradients(model, model, inputs)
    torch.testing.assert_close(loss, model(inputs).detach())
    for (name, expected), gradient in zip(eager.items(), gradients, strict=True):
        torch.testing.assert_close(gradient, expected, msg=name)


def _run_joint(joint, model: torch.nn.Module, inputs: torch.Tensor) -> list[torch.Tensor]:
    """The joint graph's loss and the gradients of the parameters, in their order."""
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    arguments = [state[spec.target].detach() if spec.target else inputs for spec in joint.graph_signature.input_specs]
    outputs = joint.graph_module(*arguments)
    specs = joint.graph_signature.output_specs
    by_parameter = {spec.target: value for spec, value in zip(specs, outputs) if spec.target}
    return [outputs[0], *(by_parameter[name] for name, _ in model.named_parameters())]


def test_a_compiled_training_graph_has_the_eager_gradients():
    model, inputs = TrainingLoss(), torch.randn(1, 2, 3, 8)
    eager = _gradients(model, model, inputs)
    torch._dynamo.reset()
    compiled = _gradients(model, torch.compile(model, backend="aot_eager", fullgraph=True), inputs)
    for name, gradient in compiled.items():
        torch.testing.assert_close(gradient, eager[name], msg=name)


TRAINING_DOCS = REPO / "docs" / "training.md"


@pytest.mark.parametrize("index", [0, 1], ids=["an OpDef op", "a swapped module, exported"])
def test_the_training_docs_examples_run_print_what_the_docs_say_and_their_loss_goes_down(index, monkeypatch, capsys):
    docs = TRAINING_DOCS.read_text()
    monkeypatch.chdir(REPO)
    exec(re.findall(r"```python\n(.*?)```", docs, re.S)[index], {})
    printed = capsys.readouterr().out.splitlines()
    losses = [float(line.rpartition(" ")[2]) for line in printed if "loss" in line]
    assert len(losses) == 2 and losses[1] < losses[0] / 2, printed
    for line in printed:
        assert f"`{line}`" in docs
