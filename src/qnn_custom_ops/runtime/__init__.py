"""Host side of the flow: build, load and call package kernels; run programs and compare."""

from .cmake_build import HostBuildError
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

__all__ = ["HostBuildError", "KernelDType", "KernelError", "KernelLibrary", "KernelLoadError", "KernelTensor",
           "MissingKernelError", "build_host_kernels", "build_host_library", "check_program_kernels",
           "load_host_library", "load_quantized_kernels", "registered_operators"]
