"""Host side of the flow: build, load and call package kernels; run programs and compare.

Imported on first use, name by name: building and calling kernels (``build_host_kernels``,
``KernelLibrary``) needs only numpy, so a kernel test or ``qnn-custom-ops cost`` starts without
torch and executorch; the ExecuTorch side pulls them in when it is used.
"""

from ..lazy import lazy_getattr

# Public name -> module that defines it.
_LAZY = {
    "HostBuildError": "cmake_build",
    "CompareError": "compare",
    "OutputReport": "compare",
    "Tolerance": "compare",
    "compare_outputs": "compare",
    "build_host_kernels": "host_build",
    "build_host_library": "host_library",
    "KernelDType": "kernel_abi",
    "KernelError": "kernel_abi",
    "KernelLibrary": "kernel_abi",
    "KernelTensor": "kernel_abi",
    "KernelCrashError": "isolation",
    "call_isolated": "isolation",
    "KernelLoadError": "loading",
    "MissingKernelError": "loading",
    "check_program_kernels": "program_libraries",
    "load_program_libraries": "program_libraries",
    "load_host_library": "loading",
    "load_quantized_kernels": "loading",
    "registered_operators": "loading",
    "RawOutputError": "raw_io",
    "TensorSpec": "raw_io",
    "read_outputs": "raw_io",
    "write_inputs": "raw_io",
    "DeviceRunner": "runners",
    "HostRunner": "runners",
    "ProgramError": "program_checks",
    "check_program": "program_checks",
    "RunnerError": "runners",
    "X86Runner": "runners",
    "method_specs": "program_checks",
}

__all__ = sorted(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
