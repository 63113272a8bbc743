"""A host program's weights in one data file beside its ``.pte`` (``external_weights=True``), each
stored once: a tied embedding, read by the embedding's gather (a program constant) and by the
delegated ``lm_head`` (an XNNPACK blob), was in the ``.pte`` twice."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from qnn_custom_ops.atomic_files import write_atomic
from qnn_custom_ops.errors import UsageError
from qnn_custom_ops.library import llm_binding
from qnn_custom_ops.lowering.program import lower_methods
from qnn_custom_ops.lowering.weight_sharing import TensorBackedData
from qnn_custom_ops.runtime import HostRunner
from qnn_custom_ops.runtime.runners import ProgramError

from .test_weights_once import TiedLm

LENGTHS = {"prefill": 4, "decode": 1}


def _lower(models: dict[str, torch.nn.Module], external_weights: bool):
    """Each model as a method taking ``LENGTHS[name]`` tokens, lowered for the host."""
    methods = {name: (model, (torch.zeros(1, LENGTHS[name], dtype=torch.long),)) for name, model in models.items()}
    return lower_methods(methods, llm_binding(), external_weights=external_weights)


def _write(program, directory: Path) -> tuple[Path, Path]:
    pte, ptd = directory / "model.pte", directory / "model.ptd"
    write_atomic(pte, program.write_to)
    write_atomic(ptd, program.write_data_to)
    return pte, ptd


def _bytes_of(tensor: torch.Tensor) -> bytes:
    return tensor.detach().contiguous().numpy().tobytes()


def test_a_tied_embedding_is_stored_once_and_the_program_runs_as_the_single_pte_does(tmp_path):
    model = TiedLm().eval()
    single = _lower({"prefill": model, "decode": model}, external_weights=False)
    external = _lower({"prefill": model, "decode": model}, external_weights=True)
    pte, ptd = _write(external, tmp_path)
    files = pte.read_bytes() + ptd.read_bytes()
    embedding, projection = _bytes_of(model.embed.weight), _bytes_of(model.proj.weight)
    assert single.buffer.count(embedding) == 2  # the gather's constant and lm_head's XNNPACK blob
    assert files.count(embedding) == 1 and pte.read_bytes().count(embedding) == 0
    assert files.count(projection) == 1
    # written from the weights' own memory: the delegated projection is not copied into bytes
    pieces = external.manager._tensor_data["weights"]._buffers
    assert model.proj.weight.data_ptr() in {p._tensor.data_ptr() for p in pieces if isinstance(p, TensorBackedData)}
    runner = HostRunner()
    for method, length in LENGTHS.items():
        tokens = torch.randint(0, 64, (1, length))
        (got,) = runner.run(pte.read_bytes(), [(tokens,)], method, data=ptd)[0]
        (want,) = runner.run(single.buffer, [(tokens,)], method)[0]
        assert torch.equal(got, want), method
        torch.testing.assert_close(got, model(tokens), rtol=1e-5, atol=1e-5)
    with pytest.raises(ProgramError, match=r"^program: its weights are in a data file \(\.ptd\) beside the \.pte"):
        HostRunner().run(pte.read_bytes(), [(torch.zeros(1, 1, dtype=torch.long),)], "decode")
    with pytest.raises(UsageError, match="keeps its weights in its .pte"):
        single.write_data_to(io.BytesIO())
    with pytest.raises(UsageError, match="is for target='host'"):
        lower_methods({"forward": (model, (torch.zeros(1, 1, dtype=torch.long),))}, llm_binding(), "qnn",
                      compile_spec=[], external_weights=True)


def test_methods_naming_different_constants_alike_each_read_their_own(tmp_path):
    """The data file keeps one value a name; two methods holding different embeddings under one
    name (``embed.weight``) must each read their own."""
    first, second = TiedLm().eval(), TiedLm().eval()
    with torch.no_grad():
        second.embed.weight.mul_(-2.0)
    pte, ptd = _write(_lower({"prefill": first, "decode": second}, external_weights=True), tmp_path)
    runner = HostRunner()
    for method, model in (("prefill", first), ("decode", second)):
        tokens = torch.randint(0, 64, (1, LENGTHS[method]))
        (got,) = runner.run(pte.read_bytes(), [(tokens,)], method, data=ptd)[0]
        torch.testing.assert_close(got, model(tokens), rtol=1e-5, atol=1e-5)
