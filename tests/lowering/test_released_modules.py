"""Lowering lets an export's converted modules go once they are exported (issue 42): with
``release_modules=True`` the caller's dict is emptied and the modules are collected before the
program is emitted, where an export peaks: nothing lowering makes keeps them alive (their graphs
were a third of the nodes alive at a 3B export's peak)."""

from __future__ import annotations

import weakref
from types import MappingProxyType

import pytest
from executorch.exir import EdgeProgramManager

pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from qnn_custom_ops.errors import UsageError  # noqa: E402
from qnn_custom_ops.llm import export_llm, quantize_llm  # noqa: E402
from qnn_custom_ops.llm.checkpoint import METHODS  # noqa: E402
from qnn_custom_ops.llm.graph_memory import graphs_collected_promptly  # noqa: E402
from qnn_custom_ops.llm_ops import llm_binding  # noqa: E402
from qnn_custom_ops.lowering.program import lower_methods  # noqa: E402

from tests.hf_models import PROMPTS, hf_model  # noqa: E402


@pytest.mark.slow  # a quantization and a lowering (seconds): kept out of the fast tier's 40 s
def test_converted_modules_are_collected_before_emission_while_their_program_lives(monkeypatch):
    emitting = EdgeProgramManager.to_executorch
    alive_at_emission: list[list[bool]] = []

    def to_executorch(self, *args, **kwargs):
        alive_at_emission.append([module() is not None for module in modules])
        return emitting(self, *args, **kwargs)

    monkeypatch.setattr(EdgeProgramManager, "to_executorch", to_executorch)
    with graphs_collected_promptly():  # as llm export lowers: the imports frozen, no collection forced
        programs = export_llm(hf_model("qwen3", num_hidden_layers=1), prefill_len=8, ctx_len=32, cache="runner")
        converted = quantize_llm(programs, "16a4w", PROMPTS, 2)
        inputs = (programs.prefill.example_inputs, programs.decode.example_inputs)
        methods = dict(zip(METHODS, zip(converted, inputs)))
        modules = [weakref.ref(module) for module in converted]
        del converted
        lowered = lower_methods(methods, llm_binding(), "host", plan_outputs=False, release_modules=True)
    assert methods == {}
    assert alive_at_emission == [[False, False]]
    assert lowered.buffer  # the program itself needs nothing of them


def test_release_modules_refuses_methods_it_cannot_empty():
    with pytest.raises(UsageError, match="pass them as a dict"):
        lower_methods(MappingProxyType({}), llm_binding(), release_modules=True)
