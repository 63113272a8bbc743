"""A host program's weights in one data file beside its ``.pte`` (``external_weights=True``), each
stored once: a tied embedding, read by the embedding's gather (a program constant) and by the
delegated ``lm_head`` (an XNNPACK blob), was in the ``.pte`` twice. ``llm export`` writes the data
file, ``llm generate`` runs with it, and an export directory without one still loads."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from qnn_custom_ops.atomic_files import write_atomic
from qnn_custom_ops.cli import main
from qnn_custom_ops.errors import UsageError
from qnn_custom_ops.llm_ops import llm_binding
from qnn_custom_ops.llm.text_generation import prompt_ids
from qnn_custom_ops.lowering.program import lower_methods
from qnn_custom_ops.lowering.weight_sharing import TensorBackedData
from qnn_custom_ops.runtime import HostRunner
from qnn_custom_ops.runtime import ProgramError

from tests.torch_ops import TiedLm

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


@pytest.mark.slow  # lowers a model to ExecuTorch twice (7-9 s)
def test_each_weight_is_stored_once_and_each_method_reads_its_own(tmp_path):
    """Two tied models as two methods: their projections are equal (stored once for both), their
    embeddings differ under one name, ``embed.weight`` -- the data file keeps one value a name,
    and each method must read its own."""
    first, second = TiedLm().eval(), TiedLm().eval()
    with torch.no_grad():
        second.embed.weight.mul_(-2.0)
    lowered = _lower({"prefill": first, "decode": second}, external_weights=True)
    pte, ptd = _write(lowered, tmp_path)
    files = pte.read_bytes() + ptd.read_bytes()
    for weight in (first.embed.weight, second.embed.weight, first.proj.weight):
        assert files.count(_bytes_of(weight)) == 1 and _bytes_of(weight) not in pte.read_bytes()
    # written from the weights' own memory: the delegated projection is not copied into bytes
    pieces = lowered.manager._tensor_data["weights"]._buffers
    assert first.proj.weight.data_ptr() in {p._tensor.data_ptr() for p in pieces if isinstance(p, TensorBackedData)}
    runner = HostRunner()
    for method, model in (("prefill", first), ("decode", second)):
        tokens = torch.randint(0, 64, (1, LENGTHS[method]))
        (got,) = runner.run(pte.read_bytes(), [(tokens,)], method, data=ptd)[0]
        torch.testing.assert_close(got, model(tokens), rtol=1e-5, atol=1e-5)
    with pytest.raises(ProgramError, match=r"^program: its weights are in a data file \(\.ptd\) beside the \.pte"):
        HostRunner().run(pte.read_bytes(), [(torch.zeros(1, 1, dtype=torch.long),)], "decode")
    with pytest.raises(UsageError, match="is for target='host'"):
        lower_methods({"forward": (first, (torch.zeros(1, 1, dtype=torch.long),))}, llm_binding(), "qnn",
                      compile_spec=[], external_weights=True)


@pytest.mark.slow
def test_a_tied_embedding_twice_in_the_single_pte_is_once_beside_it_and_computes_the_same(tmp_path):
    model = TiedLm().eval()
    single = _lower({"prefill": model, "decode": model}, external_weights=False)
    pte, ptd = _write(_lower({"prefill": model, "decode": model}, external_weights=True), tmp_path)
    embedding = _bytes_of(model.embed.weight)
    assert single.buffer.count(embedding) == 2  # the gather's constant and lm_head's XNNPACK blob
    assert (pte.read_bytes() + ptd.read_bytes()).count(embedding) == 1
    runner = HostRunner()
    for method, length in LENGTHS.items():
        tokens = torch.randint(0, 64, (1, length))
        (got,) = runner.run(pte.read_bytes(), [(tokens,)], method, data=ptd)[0]
        (want,) = runner.run(single.buffer, [(tokens,)], method)[0]
        assert torch.equal(got, want), method
    with pytest.raises(UsageError, match="keeps its weights in its .pte"):
        single.write_data_to(io.BytesIO())


transformers = pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")


class Gather(torch.nn.Module):
    """A 64 MB table that only a gather reads: a program constant, not an XNNPACK blob."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(4096, 4096))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(ids, self.table)


@pytest.mark.slow  # traced allocations make the lowering a few times slower
def test_a_weight_bound_for_the_data_file_is_written_from_its_own_memory_never_copied(tmp_path):
    """ExecuTorch's emitter copies each constant into ``bytes`` (and keeps them until the program
    is written): the weights were held twice, the peak of a large export. Now the data file is
    written from the weight's own memory: the lowering's Python allocations stay under half of it,
    and the data file holds its bytes, once."""
    import tracemalloc

    model = Gather().eval()
    size = model.table.numel() * 4
    tracemalloc.start()
    try:
        lowered = _lower({"prefill": model}, external_weights=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size / 2, (peak, size)
    pte, ptd = _write(lowered, tmp_path)
    assert ptd.read_bytes().count(_bytes_of(model.table)) == 1
    ids = torch.tensor([[5, 4095, 0, 5]])
    ((rows,),) = HostRunner().run(pte.read_bytes(), [[ids]], method="prefill", data=ptd)
    assert torch.equal(rows, model(ids))


def _tied_checkpoint(directory: Path) -> Path:
    """A Qwen3 with a tied embedding (Qwen2.5-0.5B and Llama-3.2-1B tie theirs), saved with a tokenizer."""
    from tests.hf_models import COMMON
    from tests.llm.exports import trained_tokenizer

    tokenizer = trained_tokenizer()
    config = transformers.Qwen3Config(**{**COMMON, "vocab_size": len(tokenizer)}, head_dim=16, num_hidden_layers=1,
                                      bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=True)
    config.eos_token_id = tokenizer.eos_token_id
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _generated(capsys, export: Path, prompt: str, tokens: int, *options: str) -> str:
    capsys.readouterr()
    assert main(["llm", "generate", str(export), "--prompt", prompt, "--max-new-tokens", str(tokens), *options]) == 0
    return capsys.readouterr().out.strip()


@pytest.mark.slow
def test_llm_export_stores_a_tied_embedding_once_and_llm_generate_runs_it(tmp_path, capsys, monkeypatch):
    checkpoint = _tied_checkpoint(tmp_path / "checkpoint")
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, attn_implementation="eager").eval()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    out = tmp_path / "out"
    assert main(["llm", "export", str(checkpoint), "-o", str(out), "--prefill", "8", "--ctx", "64"]) == 0
    assert json.loads((out / "manifest.json").read_text())["program_data"] == "model.ptd"
    pte, ptd = (out / "model.pte").read_bytes(), (out / "model.ptd").read_bytes()
    matrices = {name: _bytes_of(p) for name, p in model.named_parameters() if p.dim() == 2}  # the tied one once
    assert "model.embed_tokens.weight" in matrices and "lm_head.weight" not in matrices
    assert {name: (pte + ptd).count(data) for name, data in matrices.items()} == dict.fromkeys(matrices, 1)
    assert not any(data in pte for data in matrices.values())  # the .pte is the program alone
    weights = sum(p.numel() * 4 for p in model.parameters())
    assert weights < len(ptd) < 1.05 * weights, (len(ptd), weights)  # and the RoPE tables

    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    ids = prompt_ids(tokenizer, "qwen3", "The host runtime")  # as qnn_llama_runner encodes it: its BOS first
    with torch.no_grad():
        want = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
    text = tokenizer.decode(want, skip_special_tokens=True).strip()
    assert _generated(capsys, out, "The host runtime", 12) == text

    # An export written before the data file: one .pte, a manifest that names no data file.
    import qnn_custom_ops.lowering.program as program

    single_pte = program.lower_methods
    monkeypatch.setattr(program, "lower_methods", lambda *a, **k: single_pte(*a, **{**k, "external_weights": False}))
    old = tmp_path / "old"
    assert main(["llm", "export", str(checkpoint), "-o", str(old), "--prefill", "8", "--ctx", "64"]) == 0
    manifest = json.loads((old / "manifest.json").read_text())
    assert manifest.pop("program_data") is None and not (old / "model.ptd").exists()
    manifest.pop("files"), manifest.pop("checksum")  # nor did it list its files
    assert (old / "model.pte").read_bytes().count(matrices["model.embed_tokens.weight"]) == 2  # as it was
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert _generated(capsys, old, "The host runtime", 12, "--no-verify") == text  # its files cannot be checked

    # An export whose data file is gone: one line saying to export again.
    lost = shutil.copytree(out, tmp_path / "lost")
    (lost / "model.ptd").unlink()
    for options, said in (((), f"{lost}/model.ptd: missing, though the export's manifest.json lists it; export "
                               "again (or pass --no-verify to use it as it is)"),
                          (("--no-verify",), f"{lost}: no model.ptd; export again")):
        capsys.readouterr()
        assert main(["llm", "generate", str(lost), "--prompt", "hi", *options]) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith(said) and len(err.splitlines()) == 1, err

