"""8-bit KV caches (``quantize_llm(..., kv_bits=8)``, ``export_checkpoint(..., kv_bits=8)``): under
a mode of 16-bit activations each layer's K and V cache, and the new rows both methods give, share
one signed 8-bit encoding (as QNN's MatMul takes its second input, as ExecuTorch's
``annotate_kv_8bit`` gives 16a8w's caches), the export says ``get_kv_io_bit_width`` 8, and a runner
copying the caches' codes generates what a loop on reals does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from qnn_custom_ops.llm import RunnerLoop, eager_step, export_llm, quantize_llm  # noqa: E402
from qnn_custom_ops.llm.families import LlmExportError  # noqa: E402
from qnn_custom_ops.llm.runner_loop import method_encodings  # noqa: E402

from tests.conftest import shared_build  # noqa: E402
from tests.hf_models import hf_model  # noqa: E402

PROMPT = list(range(40, 53))  # 13 tokens: two prefill chunks of 8


def cache_encodings(modules) -> list[set]:
    """Per cache (K then V, per layer): the encodings of its input and new rows in both methods."""
    prefill, decode = (method_encodings(m) for m in modules)
    caches = len(prefill.inputs) - 3
    return [
        {prefill.inputs[3 + i], prefill.outputs[1 + i], decode.inputs[3 + i], decode.outputs[1 + i]}
        for i in range(caches)
    ]


@pytest.fixture(scope="module")
def programs():
    return export_llm(hf_model("qwen3"), prefill_len=8, ctx_len=32, cache="runner")


def test_kv_bits_8_gives_every_cache_and_its_new_rows_one_signed_8bit_encoding(programs):
    modules = quantize_llm(programs, "16a8w", [PROMPT], 4, kv_bits=8)
    shared = cache_encodings(modules)
    assert len(shared) == 2
    for encodings in shared:
        assert len(encodings) == 1, encodings
        (encoding,) = encodings
        assert encoding.datatype.short_name == "SFIXED_POINT_8" and encoding.offset == 0, encoding
    loop = RunnerLoop(programs.shape, *(eager_step(m) for m in modules))
    encodings = tuple(method_encodings(m) for m in modules)
    codes = RunnerLoop(programs.shape, *(eager_step(m) for m in modules), encodings=encodings)
    assert codes.caches[0].dtype == torch.int8  # the runner holds them as bytes
    reals, copied = loop.generate(PROMPT, 6), codes.generate(PROMPT, 6)
    assert copied.tokens == reals.tokens


@pytest.mark.parametrize(
    ("quant", "bits", "message"),
    [("8a8w", 8, "kv_bits=8 under 8a8w: 8-bit caches are for modes of 16-bit activations"),
     ("16a8w", 4, "kv_bits=4: the caches are 16-bit .the default. or 8-bit; pass 16 or 8")],
)
def test_kv_bits_that_cannot_work_are_one_error(programs, quant, bits, message):
    with pytest.raises(LlmExportError, match=f"^{message}"):
        quantize_llm(programs, quant, [PROMPT], 4, kv_bits=bits)


@pytest.mark.slow
def test_an_8bit_kv_export_says_so_to_the_runner_and_generates_from_copied_codes(tmp_path_factory):
    """``export_checkpoint(..., kv_bits=8)``: ``get_kv_io_bit_width`` 8, the caches' encodings
    8-bit and shared by both methods' inputs and outputs, and the host program driven with
    codes (as ``qnn_llama_runner`` copies them) generates the tokens a loop on reals does."""
    import qnn_custom_ops as qco
    from qnn_custom_ops.llm import host_step
    from qnn_custom_ops.llm_ops import llm_binding, package_dir
    from qnn_custom_ops.llm.checkpoint import METHODS, export_checkpoint
    from qnn_custom_ops.llm.manifest import LlmManifest
    from qnn_custom_ops.llm.text_generation import load_export
    from qnn_custom_ops.runtime import HostRunner
    from torch.fx import graph_module

    from tests.llm.exports import program_of, save_checkpoint

    checkpoint = shared_build("llm-checkpoint", save_checkpoint)
    out = Path(tmp_path_factory.mktemp("kv8")) / "out"
    sources = dict(graph_module._loader.eval_cache)
    export_checkpoint(checkpoint, out, prefill_len=8, ctx_len=64, quant="16a8w",
                      calibration=["The host runtime runs the program.", "A kernel for the HTP"], kv_bits=8)
    assert graph_module._loader.eval_cache == sources  # torch.fx's generated sources let go (generated_code)
    assert program_of(out).load_method("get_kv_io_bit_width").execute([])[0] == 8
    manifest = LlmManifest.read(out)
    prefill, decode = (manifest.encodings[m] for m in METHODS)
    for i in range(2 * manifest.shape.layers):
        shared = {prefill.inputs[3 + i], prefill.outputs[1 + i], decode.inputs[3 + i], decode.outputs[1 + i]}
        assert len(shared) == 1 and next(iter(shared)).datatype.short_name == "SFIXED_POINT_8", shared
    export = load_export(out)
    runner = HostRunner([qco.build_host_library(package_dir(), llm_binding())])
    steps = [host_step(runner, export.program, method, export.data) for method in METHODS]
    reals = RunnerLoop(manifest.shape, *steps).generate(PROMPT, 8)
    codes = RunnerLoop(manifest.shape, *steps, encodings=(prefill, decode)).generate(PROMPT, 8)
    assert codes.tokens == reals.tokens and len(set(reals.tokens)) > 2
