"""The host speed kernels (``speed_kernels/``): ``qco_host::mm.out``, ``mm_panels.out``, ``bmm.out``,
``permute_copy.out``, ``expand_copy.out``, ``add.out``, ``_softmax.out`` and ``quantize_per_tensor.out``,
bit-identical to the ExecuTorch kernels they stand in for
in a quantized host program (``lowering.host_speed``), built once per machine and executorch
version, loaded when a program names them."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from ..progress import Progress, silent
from .cmake_build import cache_root, cached_build, content_key, files_under, work_dir
from .loading import executorch_paths, load_host_library

SOURCES = Path(__file__).resolve().parent / "speed_kernels"
LIBRARY = "libqco_host_kernels.so"
#: The namespace of the kernels: a program naming one needs this library.
NAMESPACE = "qco_host::"


def build_speed_library(build_root: Path | None = None, progress: Progress = silent) -> Path:
    """Build (or reuse) the library, keyed by its sources, the executorch version and this CPU (a
    build is said to ``progress``)."""
    include, libexecutorch = executorch_paths()
    options = {"EXECUTORCH_INCLUDE": str(include), "EXECUTORCH_LIBRARY_DIR": str(libexecutorch.parent)}
    key = content_key(SOURCES, files_under(SOURCES), {**options, "executorch": version("executorch")})
    root = build_root or cache_root() / "executorch"
    work = work_dir(root, "qco_host", SOURCES, options)
    return cached_build(
        SOURCES,
        root / f"qco_host-{key}",
        work,
        LIBRARY,
        options,
        "host speed kernels",
        keyed=SOURCES,
        progress=progress,
    )


def load_speed_kernels(progress: Progress = silent) -> None:
    """Build if needed (said to ``progress``) and load the library (once per interpreter)."""
    load_host_library(build_speed_library(progress=progress))
