"""The Hexagon check: a package's kernels built for the Hexagon ISA, run under an emulator,
compared bit for bit with the host build, and their executed VLIW packets counted.

Toolchain without the SDK: PyPI ``ziglang`` is a clang with musl and libc++ for
``hexagon-linux-musl`` (v66, HVX 128-byte vectors); Debian's ``qemu-user`` runs the static
program (``qemu-hexagon -cpu v67``, Linux user mode, HVX integer instructions included). The
program is the package's C ABI (the same ``kernels/*.h`` the HTP build and the host build
compile) and a generated driver reading cases from a file. What this proves: the kernel's math
on the Hexagon ISA (32-bit, its compiler, HVX) computes the host's bits. What it does not: the
HTP graph runtime, VTCM, threads, timing -- packets are counted on a functional emulator,
they are not cycles on a phone.

One module per role, data flowing down: ``toolchain`` (zig c++ and qemu-hexagon), ``driver``
(the program and its cases and results files), ``emulation`` (the run under qemu-hexagon and its
packets), ``check`` (host against Hexagon). Patch a name where it is read: in its module.
"""

from .check import (
    LIBM_REPLACEMENTS,
    CheckResult,
    first_mismatch,
    hexagon_check,
    hexagon_packets,
    host_results,
    libm_calls,
    libm_hint,
    refusal_fix,
)
from .driver import build_hexagon_driver, decode_results, encode_cases
from .emulation import CASE_SECONDS, ELEMENT_SECONDS, HexagonRun, PacketCounter, case_time_limit, run_on_hexagon
from .toolchain import (
    FP_CONTRACT,
    HEXAGON_CPU,
    HEXAGON_FLAGS,
    QEMU_CPU,
    HexagonToolError,
    check_toolchain,
    compile_for_hexagon,
    emulator,
    hexagon_compiler,
    zig_cache_dir,
)

__all__ = [
    "CASE_SECONDS",
    "ELEMENT_SECONDS",
    "FP_CONTRACT",
    "HEXAGON_CPU",
    "HEXAGON_FLAGS",
    "LIBM_REPLACEMENTS",
    "QEMU_CPU",
    "CheckResult",
    "HexagonRun",
    "HexagonToolError",
    "PacketCounter",
    "build_hexagon_driver",
    "case_time_limit",
    "check_toolchain",
    "compile_for_hexagon",
    "decode_results",
    "emulator",
    "encode_cases",
    "first_mismatch",
    "hexagon_check",
    "hexagon_compiler",
    "hexagon_packets",
    "host_results",
    "libm_calls",
    "libm_hint",
    "refusal_fix",
    "run_on_hexagon",
    "zig_cache_dir",
]
