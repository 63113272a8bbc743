"""Where a QNN program parts from the converted model, op by op, on the x86 HTP simulator.

A delegated graph is one context binary: its intermediate tensors cannot be read. The probe
program is the converted model with every quantized op output also made a program output (as the
next op reads it, after its quantize/dequantize); lowered to QNN once and run on the simulator,
each is compared with the converted model's own in steps of its encoding, in graph order. QNN's
built-ins round as QNN does, so small differences are everywhere; the op where one first grows
past a fraction of its encoding's range is the one to look at.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..lowering.program import lower_methods
from ..torch_bridge import OpPackageBinding
from ..torch_bridge.quantized import encoding_of, is_dequantize, is_quantize
from .simulator import SimulatorRunner


@dataclass(frozen=True)
class OpDifference:
    """One op's output on the simulator against the converted model's: the largest difference
    in steps of its encoding, and that encoding's range of codes."""

    node: str
    op: str
    module: str
    steps: float
    codes: int

    def __str__(self) -> str:
        where = f", {self.module}" if self.module else ""
        return f"{self.node} ({self.op}{where}): {self.steps:.0f} steps of {self.codes}"


def _input(node: torch.fx.Node) -> torch.fx.Node | None:
    """``node``'s first argument when it is a node."""
    first = node.args[0] if node.args else None
    return first if isinstance(first, torch.fx.Node) else None


def _op_outputs(module: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The dequantize after each op's quantized output (a ``q -> dq`` pair whose quantize takes
    the op's result), in graph order."""
    found = []
    for node in module.graph.nodes:
        quantize = _input(node) if is_dequantize(node) else None
        if quantize is not None and is_quantize(quantize) and _input(quantize) is not None:
            found.append(node)
    return found


def _producer(dequantize: torch.fx.Node) -> torch.fx.Node:
    """The op whose output ``dequantize`` reads (through a multi-output op's ``getitem``)."""
    quantize = _input(dequantize)
    produced = _input(quantize) if quantize is not None else None
    assert produced is not None  # _op_outputs found it so
    owner = _input(produced) if "getitem" in str(produced.target) else None
    return owner or produced


def _module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return list(stack.values())[-1][0] if stack else ""


def probe_differences(
    converted: torch.fx.GraphModule,
    inputs: Sequence[torch.Tensor],
    binding: OpPackageBinding,
    compile_spec: list,
    runner: SimulatorRunner | None = None,
) -> list[OpDifference]:
    """Each quantized op output of ``converted`` (a PT2E-converted module) on QNN, lowered with
    ``compile_spec`` and run on the simulator, against the module's own on ``inputs``. Lowering for
    QNN needs a QNN SDK, or this process started with ``simulator_environment()`` (a script calls
    ``reexecute_in_simulator_environment(sys.argv)`` first)."""
    probe = copy.deepcopy(converted)
    observed = _op_outputs(probe)
    output = probe.graph.output_node()
    results = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    output.args = ((*results, *observed),)
    probe.graph._codegen = torch.fx.graph.CodeGen()  # a flat tuple out, the probes after the results
    probe.recompile()
    with torch.no_grad():
        expected = list(probe(*inputs))[len(results) :]
    program = lower_methods({"forward": (probe, tuple(inputs))}, binding, "qnn", compile_spec=compile_spec)
    got = (runner or SimulatorRunner()).run(program.buffer, [tuple(inputs)])[0][len(results) :]
    differences = []
    for node, want, have in zip(observed, expected, got):
        encoding = encoding_of(node)
        low, high = encoding.datatype.integer_range
        producer = _producer(node)
        steps = float((have.float() - want.float()).abs().max()) / encoding.scale
        differences.append(OpDifference(producer.name, str(producer.target), _module_path(producer), steps, high - low))
    return differences


def first_parting(differences: Sequence[OpDifference], fraction: float = 0.01) -> OpDifference | None:
    """The first op whose output differs by more than ``fraction`` of its encoding's range (None
    when none does): past rounding, the op to look at."""
    return next((d for d in differences if d.steps > fraction * d.codes), None)
