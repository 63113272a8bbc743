"""A host program from ``lower(..., target="host")`` runs on ExecuTorch's own runtime after one
call, ``qco.load_program_libraries(program, [library])``: the op package's host library, and
ExecuTorch's quantized kernels and our speed kernels where the program names them. Before it, a
missing kernel is one error naming the library it belongs to. In a child process: a kernel
library, once loaded, stays registered for the life of the interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

CHILD = """
import torch
import qnn_custom_ops as qco
from executorch.runtime import Runtime
from qnn_custom_ops.runtime import MissingKernelError, check_program_kernels
from qnn_custom_ops.runtime.loading import program_operators
from tests.conftest import OP_PACKAGES
from tests.torch_ops import EXAMPLE_PACKAGE, MUL3, ConvMul3, pt2e_quantize

binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})
library = qco.build_host_library(OP_PACKAGES / "ExampleOpPackage", binding)
samples = [(torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(i)),) for i in range(4)]
program = qco.lower(pt2e_quantize(ConvMul3().eval(), samples, binding), samples[0], binding, target="host")
print("needs", sorted(op.split("::")[0] for op in program_operators(program.buffer)))
qco.load_host_library(library)
try:
    check_program_kernels(program.buffer)
except MissingKernelError as error:
    print("missing:", error)
qco.load_program_libraries(program.buffer, [library])
(output,) = Runtime.get().load_program(program.buffer).load_method("forward").execute(list(samples[0]))
print("ran", tuple(output.shape))
"""


@pytest.mark.slow
def test_a_host_program_runs_on_executorchs_runtime_after_one_call():
    result = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True)
    said = [line for line in result.stdout.splitlines() if line.startswith(("needs", "missing", "ran"))]
    assert result.returncode == 0 and len(said) == 3, result.stdout + result.stderr[-3000:]
    needs, missing, ran = said
    assert "'qco_host'" in needs and "'qco_quantized'" in needs, needs  # speed kernels and the package's own
    assert missing.startswith("missing: program needs kernels that are not registered (qco_host::"), missing
    assert ": the host speed kernels" in missing and "qco_quantized::" not in missing, missing  # the package's is loaded
    assert missing.endswith("load them all with qnn_custom_ops.load_program_libraries(program, [the op package's "
                            "host library])"), missing
    assert ran == "ran (1, 4, 8, 8)"
