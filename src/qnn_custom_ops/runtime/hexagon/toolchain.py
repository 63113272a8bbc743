"""The Hexagon toolchain without the SDK: ``zig c++`` (PyPI ``ziglang``) building for
``hexagon-linux-musl``, Debian's ``qemu-hexagon`` running what it builds, the CPU and flags every
Hexagon build shares, and a check that both tools work."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ...errors import ReportedError
from ...progress import Progress, silent

#: The CPU the programs are built for: HTP v66 scalar core with 128-byte HVX (integer).
HEXAGON_CPU = "hexagonv66+hvxv66+hvx_length128b"
#: The emulator's CPU model: qemu 7.2 does not read v68+ ELF flags; v67 runs v66 code.
QEMU_CPU = "v67"
#: The floating-point contract of every build of a kernel: no contraction of a*b+c into FMA,
#: which compilers do in different places for different targets (different float32 bits).
FP_CONTRACT = "-ffp-contract=off"
HEXAGON_FLAGS = ("-target", "hexagon-linux-musl", f"-mcpu={HEXAGON_CPU}", "-O2", "-std=c++17", FP_CONTRACT, "-static")


class HexagonToolError(ReportedError, RuntimeError):
    """The Hexagon compiler or emulator is missing or failed."""


def zig_cache_dir() -> Path:
    """zig's own cache (libc++ and musl built for Hexagon, ~3 CPU-minutes once): shared by
    every build cache of the user, ``$QCO_ZIG_CACHE_DIR`` moves it."""
    if os.environ.get("QCO_ZIG_CACHE_DIR"):
        return Path(os.environ["QCO_ZIG_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "qnn_custom_ops" / "zig"


def hexagon_compiler() -> list[str]:
    """``zig c++`` of the installed ``ziglang``."""
    if importlib.util.find_spec("ziglang") is None:
        raise HexagonToolError("the Hexagon compiler is missing: pip install 'ziglang==0.17.1' (make test installs it)")
    return [sys.executable, "-m", "ziglang", "c++"]


def emulator() -> str:
    path = shutil.which("qemu-hexagon")
    if path is None:
        raise HexagonToolError("qemu-hexagon is missing: apt-get install qemu-user (make test installs it)")
    return path


def compile_for_hexagon(
    sources: Sequence[Path],
    output: Path,
    includes: Sequence[Path] = (),
    extra: Sequence[str] = (),
    progress: Progress = silent,
) -> None:
    """Compile and link ``sources`` into a static Hexagon program (``-c`` in ``extra``: an object);
    zig's one-time build of libc++ and musl for Hexagon is said to ``progress`` first."""
    command = [
        *hexagon_compiler(),
        *HEXAGON_FLAGS,
        *(f"-I{d}" for d in includes),
        *extra,
        *map(str, sources),
        "-o",
        str(output),
    ]
    env = {**os.environ, "ZIG_GLOBAL_CACHE_DIR": str(zig_cache_dir())}
    if not zig_cache_dir().is_dir():
        progress(
            f"building libc++ and musl for Hexagon into {zig_cache_dir()}, once for every package "
            "(about 3 CPU-minutes: some minutes here)"
        )
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        lines = (result.stdout + result.stderr).strip().splitlines()
        errors = [line for line in lines if "error" in line.lower()] or lines[-20:]
        raise HexagonToolError("Hexagon build failed:\n" + "\n".join(errors))


def check_toolchain(progress: Progress = silent) -> str:
    """Build and run a tiny program for Hexagon, and a tiny shared library: both tools work, and
    zig's libc++ for Hexagon, static and position-independent, is built (the first time, some
    CPU-minutes, said to ``progress``) before any check or ``make htp_v*`` needs it. Returns the
    program's output."""
    with tempfile.TemporaryDirectory(prefix="qco-hexagon-toolchain-") as tmp:
        source = Path(tmp) / "hello.cpp"
        source.write_text(
            "#include <cstdio>\n#include <vector>\nint main() { std::vector<long> v(3, 1);\n"
            '  std::printf("hexagon ok: sizeof(long) %zu\\n", sizeof(v[0])); }\n'
        )
        compile_for_hexagon([source], Path(tmp) / "hello", progress=progress)
        compile_for_hexagon([source], Path(tmp) / "libhello.so", extra=["-shared", "-fPIC"], progress=progress)
        result = subprocess.run(
            [emulator(), "-cpu", QEMU_CPU, str(Path(tmp) / "hello")], capture_output=True, text=True
        )
    if result.returncode != 0:
        raise HexagonToolError(f"qemu-hexagon could not run a Hexagon program: {result.stderr.strip()[-300:]}")
    return result.stdout.strip()
