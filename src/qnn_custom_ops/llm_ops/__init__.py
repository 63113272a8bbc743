"""The LLM op set for the HTP: RMSNorm, gated SiLU/GELU, RoPE and a static KV cache (op package
``op_packages/LlmOpPackage``, torch namespace ``qco_llm``), each with its PyTorch reference,
fake kernel, ``.out`` variant and backward; ``swap_modules`` to put them into a model; and the
shapes and cases they are measured and checked on.

Its names are imported on first use (``lazy``)."""

from ..lazy import lazy_getattr

_SOURCES = {
    "LLM_OPS": "ops",
    "NAMESPACE": "ops",
    "llm_binding": "ops",
    "llm_ops": "ops",
    "llm_package": "ops",
    "llm_quant_overrides": "ops",
    "package_dir": "ops",
    "LlmOpInputError": "reference",
    "SelectError": "swap",
    "swap_modules": "swap",
}

__getattr__ = lazy_getattr(__name__, _SOURCES)
__all__ = sorted(_SOURCES)
