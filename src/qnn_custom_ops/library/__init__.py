"""A ready library of LLM custom ops for the HTP: RMSNorm, gated SiLU/GELU, RoPE and a static
KV cache (op package ``op_packages/LlmOpPackage``, torch namespace ``qco_llm``), and
``swap_modules`` to put them into a model.
"""

from .llm import LLM_OPS, NAMESPACE, llm_binding, llm_ops, llm_package, llm_quant_overrides, package_dir
from .reference import LlmOpInputError
from .swap import SelectError, swap_modules

__all__ = ["LLM_OPS", "NAMESPACE", "LlmOpInputError", "SelectError", "llm_binding", "llm_ops", "llm_package",
           "llm_quant_overrides", "package_dir", "swap_modules"]
