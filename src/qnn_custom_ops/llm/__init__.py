"""The route from a Hugging Face causal LM to the prefill and decode programs ExecuTorch's
``qnn_llama_runner`` runs, on the ops of ``llm_ops``: the static model and its export
(``export_llm``), quantization (``quantize_llm``), greedy generation, the runner's loop, the
export directory and text generation (``llm export``, ``llm generate``).

Its names are imported on first use (``lazy``): a light submodule (the family registries, the
export directory's files, the sampling options) is imported without torch, executorch and
transformers, so the ``llm`` commands check their arguments at once."""

from ..lazy import lazy_getattr

_SOURCES = {
    "greedy": "generation",
    "greedy_batch": "generation",
    "quantize_llm": "quantization",
    "LlmExportError": "families",
    "export_llm": "hf",
    "RunnerLoop": "runner_loop",
    "eager_step": "steps",
    "host_step": "steps",
}

__getattr__ = lazy_getattr(__name__, _SOURCES)
__all__ = sorted(_SOURCES)
