"""A ready library of LLM custom ops for the HTP: RMSNorm, gated SiLU/GELU, RoPE and a static
KV cache (op package ``op_packages/LlmOpPackage``, torch namespace ``qco_llm``),
``swap_modules`` to put them into a model, and ``export_llm`` / ``greedy`` to turn a Hugging Face
causal LM into prefill and decode programs on them and generate with those.

Its names are imported on first use (``lazy``): a light submodule (the family registries, the
export directory's files, the sampling options) is imported without torch, executorch and
transformers, so the ``llm`` commands check their arguments at once.
"""

from ..lazy import lazy_getattr

_SOURCES = {
    "greedy": "generation",
    "greedy_batch": "generation",
    "quantize_llm": "generation",
    "LlmExportError": "families",
    "export_llm": "hf",
    "LLM_OPS": "llm",
    "NAMESPACE": "llm",
    "llm_binding": "llm",
    "llm_ops": "llm",
    "llm_package": "llm",
    "llm_quant_overrides": "llm",
    "package_dir": "llm",
    "LlmOpInputError": "reference",
    "RunnerLoop": "runner_loop",
    "eager_step": "steps",
    "host_step": "steps",
    "SelectError": "swap",
    "swap_modules": "swap",
}

__getattr__ = lazy_getattr(__name__, _SOURCES)
__all__ = sorted(_SOURCES)
