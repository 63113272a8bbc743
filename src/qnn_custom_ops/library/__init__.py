"""A ready library of LLM custom ops for the HTP: RMSNorm, gated SiLU/GELU, RoPE and a static
KV cache (op package ``op_packages/LlmOpPackage``, torch namespace ``qco_llm``),
``swap_modules`` to put them into a model, and ``export_llm`` / ``greedy`` to turn a Hugging Face
causal LM into prefill and decode programs on them and generate with those.
"""

from .generation import greedy, greedy_batch, quantize_llm
from .hf import LlmExportError, export_llm
from .llm import LLM_OPS, NAMESPACE, llm_binding, llm_ops, llm_package, llm_quant_overrides, package_dir
from .reference import LlmOpInputError
from .runner_loop import RunnerLoop
from .steps import eager_step, host_step
from .swap import SelectError, swap_modules

__all__ = [
    "LLM_OPS",
    "NAMESPACE",
    "LlmExportError",
    "LlmOpInputError",
    "RunnerLoop",
    "SelectError",
    "eager_step",
    "export_llm",
    "greedy",
    "greedy_batch",
    "host_step",
    "llm_binding",
    "llm_ops",
    "llm_package",
    "llm_quant_overrides",
    "package_dir",
    "quantize_llm",
    "swap_modules",
]
