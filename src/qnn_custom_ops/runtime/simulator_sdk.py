"""A QNN SDK root for ExecuTorch's QNN backend on this machine, assembled from a QAIRT wheel.

ExecuTorch 1.5.1's QNN Python adaptor and runtime backend (in its wheel) are built for QNN 2.37
and open ``$QNN_SDK_ROOT/lib/x86_64-linux-clang/libQnnHtp.so`` (then the bare name, so
``LD_LIBRARY_PATH`` must hold that folder when the process starts). The root assembled here has
there our shim (``qnn_shim/htp_shim.c``: the real 2.47+ backend behind the interface, with the
one argument layout that changed since 2.37 translated), QAIRT's ``libQnnSystem.so`` and the C++
runtime both link. With it ExecuTorch's own ``QnnPartitioner`` prepares graphs and its runtime
executes them on QAIRT's x86 HTP simulator: no SDK, no ExecuTorch build.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from filelock import FileLock

from ..errors import ReportedError
from ..generator.qhpi import abi_header_context
from ..generator.render import template_environment
from ..progress import Progress, silent
from ..qairt import QAIRT_VERSIONS, qairt_backend
from ..qnn_sdk import sdk_root

#: The release the simulator uses unless asked for another: the newest pinned one.
SIMULATOR_QAIRT = QAIRT_VERSIONS[-1]
SHIM = Path(__file__).parent / "qnn_shim" / "htp_shim.c"
LIBRARY_DIR = "lib/x86_64-linux-clang"
#: Set in a process whose environment was made for the simulator (re-executed once, never twice).
MARK = "QCO_QNN_SIMULATOR"


class SimulatorError(ReportedError, RuntimeError):
    """The simulator's SDK root could not be assembled."""


def simulator_sdk_root(version: str = SIMULATOR_QAIRT, progress: Progress = silent) -> Path:
    """``<qairt>/<version>/sdk``: the shim built (gcc, keyed by its source), the wheel's
    ``libQnnSystem.so`` and C++ runtime linked in beside it; once per release (the backend's
    install, the first time, said to ``progress``)."""
    backend = qairt_backend(version, progress)
    release = backend.parent.parent
    root = release / "sdk"
    libraries = root / LIBRARY_DIR
    header = template_environment().get_template("qhpi/abi.h.j2").render(**abi_header_context())
    key = hashlib.sha256(SHIM.read_bytes() + header.encode()).hexdigest()[:16]
    stamp = libraries / f".shim-{key}"
    with FileLock(str(root) + ".lock"):
        if stamp.is_file():
            return root
        libraries.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".shim-", dir=libraries) as tmp:
            (Path(tmp) / "qco").mkdir()
            (Path(tmp) / "qco" / "qhpi_abi.h").write_text(header)
            built = Path(tmp) / "libQnnHtp.so"
            command = ["gcc", "-std=gnu11", "-O2", "-Wall", "-Werror", "-fPIC", "-shared", f"-I{tmp}", str(SHIM),
                       "-Wl,-soname,libQnnHtp.so", "-Wl,-z,nodelete", "-ldl", "-o", str(built)]  # fmt: skip
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                raise SimulatorError(f"the QNN shim did not build: {result.stderr.strip()[-500:]}")
            built.rename(libraries / "libQnnHtp.so")
        for target in [backend.with_name("libQnnSystem.so"), *sorted((release / "onnxruntime_qnn.libs").iterdir())]:
            link = libraries / target.name
            link.unlink(missing_ok=True)
            link.symlink_to(os.path.relpath(target, libraries))
        for old in libraries.glob(".shim-*"):
            old.unlink()
        stamp.touch()
    return root


def simulator_environment(version: str = SIMULATOR_QAIRT, progress: Progress = silent) -> dict[str, str]:
    """The variables ExecuTorch's QNN backend needs from the start of a process to run here (the
    SDK root assembled first if it is not, said to ``progress``)."""
    root = simulator_sdk_root(version, progress)
    paths = [str(root / LIBRARY_DIR), *filter(None, [os.environ.get("LD_LIBRARY_PATH", "")])]
    return {"QNN_SDK_ROOT": str(root), "LD_LIBRARY_PATH": os.pathsep.join(paths), MARK: version}


def in_simulator_environment(version: str = SIMULATOR_QAIRT) -> bool:
    """True when this process started with ``simulator_environment(version)``."""
    return os.environ.get(MARK) == version


def lowers_for_qnn_here() -> bool:
    """Whether this process can lower for QNN: a QNN SDK, or the simulator's environment."""
    return sdk_root() is not None or in_simulator_environment()


def reexecute_in_simulator_environment(
    argv: Sequence[str], version: str = SIMULATOR_QAIRT, progress: Progress = silent
) -> None:
    """Replace this process by ``argv`` (a Python command line) with the simulator's environment,
    unless it already has it: the dynamic loader reads ``LD_LIBRARY_PATH`` only at start. The
    backend's install, the first time, is said to ``progress``."""
    if in_simulator_environment(version):
        return
    environment: Mapping[str, str] = {**os.environ, **simulator_environment(version, progress)}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv], dict(environment))
