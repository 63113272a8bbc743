"""QAIRT's x86 HTP backends, from PyPI: where ``htp-check`` finds each release's ``libQnnHtp.so``.

Qualcomm's x86 HTP backend (graph preparation and its HTP simulator) ships in the
``onnxruntime-qnn`` wheels; only ``libQnnHtp.so`` and the C++ runtime it links are kept, one
folder per release, installed once for every build cache (pip, the package registry: never the
QNN SDK's own download).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from filelock import FileLock

from .errors import ReportedError
from .progress import Progress, silent

#: QAIRT release -> the ``onnxruntime-qnn`` wheel that ships its x86 HTP backend.
QAIRT_WHEELS = {"2.47": "2.3.0", "2.50.40": "2.6.0", "2.51": "2.7.0"}
QAIRT_VERSIONS = tuple(QAIRT_WHEELS)
#: The libraries of a wheel's ``onnxruntime_qnn/`` that are kept (with its ``.libs``, their C++ runtime).
KEPT = ("libQnnHtp.so", "libQnnSystem.so")
#: The backend a QHPI package is linked against: the oldest, so it needs nothing newer.
LINK_QAIRT = "2.47"


class QairtError(ReportedError, RuntimeError):
    """A QAIRT backend could not be installed, or what is installed is not one."""


def _check_libraries(entry: Path, library: Path) -> None:
    """Each kept library is an ELF shared object: a file cut short or overwritten is one line."""
    for path in (library.with_name(name) for name in KEPT):
        with path.open("rb") as file:
            if file.read(4) != b"\x7fELF":
                raise QairtError(f"{path}: not a shared library (damaged?): delete {entry} and it is installed again")


def qairt_dir() -> Path:
    """Where the QAIRT backends live, one folder per release (~100 MB each, installed once for
    every cache): ``$QCO_QAIRT_DIR``, else ``~/.cache/qnn_custom_ops/qairt``."""
    if os.environ.get("QCO_QAIRT_DIR"):
        return Path(os.environ["QCO_QAIRT_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "qnn_custom_ops" / "qairt"


def qairt_backend(version: str, progress: Progress = silent) -> Path:
    """The x86 ``libQnnHtp.so`` of QAIRT ``version``, from its pinned ``onnxruntime-qnn`` wheel
    (downloaded with pip the first time, said to ``progress``: only the backend,
    ``libQnnSystem.so`` and the C++ runtime they link are kept)."""
    if version not in QAIRT_WHEELS:
        raise QairtError(f"--qairt {version}: use one of {', '.join(QAIRT_WHEELS)}")
    entry = qairt_dir() / version
    library = entry / "onnxruntime_qnn" / "libQnnHtp.so"
    entry.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(entry) + ".lock"):
        if all(library.with_name(name).is_file() for name in KEPT):
            _check_libraries(entry, library)
            return library
        shutil.rmtree(entry, ignore_errors=True)  # an install cut short, or one that kept less
        wheel = f"onnxruntime-qnn=={QAIRT_WHEELS[version]}"
        progress(f"installing QAIRT {version}'s x86 HTP backend from {wheel} into {entry} (about 100 MB, once)")
        with tempfile.TemporaryDirectory(prefix=".qairt-", dir=entry.parent) as tmp:
            download = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
            result = subprocess.run([*download, "-d", tmp, wheel], capture_output=True, text=True)
            wheels = list(Path(tmp).glob("*.whl"))
            if result.returncode != 0 or not wheels:
                said = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
                raise QairtError(f"QAIRT {version}: pip could not download {wheel}: {said}")
            staging = Path(tmp) / "backend"
            with zipfile.ZipFile(wheels[0]) as archive:
                members = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] in KEPT or ".libs/" in n]
                archive.extractall(staging, members)
            staging.rename(entry)
    return library
