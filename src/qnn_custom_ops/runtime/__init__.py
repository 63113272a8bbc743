"""Host side of the flow: build, load and call package kernels; run programs and compare."""

from .cmake_build import HostBuildError
from .compare import CompareError, OutputReport, Tolerance, compare_outputs
from .host_build import build_host_kernels
from .host_library import build_host_library
from .kernel_abi import KernelDType, KernelError, KernelLibrary, KernelTensor
from .loading import (
    KernelLoadError,
    MissingKernelError,
    check_program_kernels,
    load_host_library,
    load_quantized_kernels,
    registered_operators,
)
from .raw_io import RawOutputError, TensorSpec, read_outputs, write_inputs
from .runners import DeviceRunner, HostRunner, RunnerError, X86Runner, method_specs

__all__ = ["CompareError", "DeviceRunner", "HostBuildError", "HostRunner", "KernelDType", "KernelError", "KernelLibrary",
           "KernelLoadError", "KernelTensor", "MissingKernelError", "OutputReport", "RawOutputError",
           "RunnerError", "TensorSpec", "Tolerance", "X86Runner", "build_host_kernels", "build_host_library",
           "check_program_kernels", "compare_outputs", "load_host_library", "load_quantized_kernels",
           "method_specs", "read_outputs", "registered_operators", "write_inputs"]
