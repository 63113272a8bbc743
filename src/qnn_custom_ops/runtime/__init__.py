"""Host side of the flow: build and call the package kernels on this machine."""

from .host_build import HostBuildError, build_host_kernels
from .kernel_abi import KernelDType, KernelError, KernelLibrary, KernelTensor

__all__ = ["HostBuildError", "KernelDType", "KernelError", "KernelLibrary", "KernelTensor",
           "build_host_kernels"]
