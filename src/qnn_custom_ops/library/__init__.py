"""The names ``qnn_custom_ops.library`` held before it was split in two: the LLM op set is
``qnn_custom_ops.llm_ops``, the Hugging Face route ``qnn_custom_ops.llm``. Kept for one release
(see CHANGELOG.md); import from those packages instead."""

from ..lazy import lazy_getattr

_SOURCES = {
    **{
        name: ".llm_ops"
        for name in (
            "LLM_OPS",
            "NAMESPACE",
            "llm_binding",
            "llm_ops",
            "llm_package",
            "llm_quant_overrides",
            "package_dir",
            "LlmOpInputError",
            "SelectError",
            "swap_modules",
        )
    },
    **{
        name: ".llm"
        for name in (
            "greedy",
            "greedy_batch",
            "quantize_llm",
            "LlmExportError",
            "export_llm",
            "RunnerLoop",
            "eager_step",
            "host_step",
        )
    },
}

__getattr__ = lazy_getattr(__name__, _SOURCES)
__all__ = sorted(_SOURCES)
