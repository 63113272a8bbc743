"""Where an LLM export's programs are lowered for and run: the QNN compile spec of
``llm export --target qnn``, and the two methods as steps for ``llm generate``, one small entry
per target.

Without a QNN SDK, a QNN export is prepared by QAIRT's x86 libraries from PyPI (a process started
with ``runtime.simulator_sdk.simulator_environment()``): the LlmOpPackage registers there as its
QHPI build for x86 (target CPU), and for the phone as its Hexagon build, a path on the device.
Such an export runs here on the x86 HTP simulator, the context binary the phone would run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..llm_ops.ops import PACKAGE_NAME, llm_binding, package_dir
from ..lowering import OpPackageBuild, compile_spec, makefile_builds
from ..lowering.compile_spec import Platform, Target, chipset
from ..progress import Progress, silent
from ..runtime import HostRunner
from ..runtime.host_library import build_host_library
from ..runtime.htp import build_qhpi_package
from ..runtime.simulator import SimulatorSession
from ..runtime.simulator_sdk import SIMULATOR_QAIRT, in_simulator_environment, lowers_for_qnn_here
from .families import LlmExportError
from .runner_loop import MethodEncodings
from .steps import Step, codes_step, host_step, simulator_step

#: An export's methods, in the runner's order.
METHODS = ("prefill_forward", "kv_forward")


def qnn_compile_spec(soc: str | None, quant: str, progress: Progress = silent) -> list:
    """The QNN compile spec of the LlmOpPackage for ``soc`` (its HTP architecture); fp16 for a
    float export. With a QNN SDK, the package's Makefile builds; in the simulator's environment,
    its QHPI build for x86 (said to ``progress`` when it is built) and its Hexagon build's path on
    the phone."""
    from executorch.backends.qualcomm.serialization.qc_schema import _soc_info_table

    if soc is None:
        raise LlmExportError("--target qnn needs --soc (e.g. SM8650), the phone's chipset")
    if not lowers_for_qnn_here():
        raise LlmExportError(
            "target='qnn' needs the QNN SDK (QNN_SDK_ROOT), or a process started with QAIRT's x86 libraries: "
            "`qnn-custom-ops llm export --target qnn` starts one itself; a script calls "
            "qnn_custom_ops.runtime.simulator_sdk.reexecute_in_simulator_environment(sys.argv) first"
        )
    arch = int(_soc_info_table[chipset(soc)].htp_info.htp_arch)
    if in_simulator_environment():
        device = makefile_builds(package_dir(), PACKAGE_NAME, arch, api="qhpi")[0]
        x86 = build_qhpi_package(package_dir(), llm_binding().package, progress)
        builds = [device, OpPackageBuild(Target.CPU, Platform.X86_64, x86)]
    else:
        builds = makefile_builds(package_dir(), PACKAGE_NAME, arch)
    return compile_spec(soc, llm_binding(), builds, quant=quant != "none")


@dataclass(frozen=True)
class ExportedMethods:
    """What running an export's methods needs: its program, the data file of its weights (None
    when in the .pte) and its methods' encodings (None for a float export)."""

    program: bytes
    data: Path | None
    encodings: dict[str, MethodEncodings] | None


@dataclass(frozen=True)
class RunsOn:
    """Where a target's exports run here, said before they do, and their steps (what they build
    or install first said to the ``Progress`` given)."""

    where: str
    steps: Callable[[ExportedMethods, Progress], AbstractContextManager[tuple[Step, Step]]]


@contextmanager
def _host_steps(methods: ExportedMethods, progress: Progress) -> Iterator[tuple[Step, Step]]:
    """ExecuTorch's runtime here, with the LlmOpPackage's host library; both methods loaded
    ahead, so tokens/s count the calls."""
    library = build_host_library(package_dir(), llm_binding(), progress=progress)
    runner = HostRunner([library], progress=progress)
    for method in METHODS:
        runner.load(methods.program, method, methods.data)
    prefill, decode = (host_step(runner, methods.program, method, methods.data) for method in METHODS)
    yield prefill, decode


@contextmanager
def _simulator_steps(methods: ExportedMethods, progress: Progress) -> Iterator[tuple[Step, Step]]:
    """ExecuTorch's QNN backend on QAIRT's x86 HTP simulator, the program held by one child
    process; a quantized export's methods take and give codes, as on the phone."""
    with SimulatorSession(methods.program, progress=progress) as session:
        steps = [simulator_step(session, method) for method in METHODS]
        if methods.encodings is not None:
            steps = [
                codes_step(step, methods.encodings[m].inputs, methods.encodings[m].outputs)
                for step, m in zip(steps, METHODS)
            ]
        yield steps[0], steps[1]


#: Per export target: where ``llm generate`` runs its programs.
RUNS_ON = {
    "host": RunsOn("on the host, as qnn_llama_runner runs the program", _host_steps),
    "qnn": RunsOn(
        f"on QAIRT {SIMULATOR_QAIRT}'s x86 HTP simulator (ExecuTorch's QNN backend, the context binary the phone runs)",
        _simulator_steps,
    ),
}
