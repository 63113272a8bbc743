"""``llm export --target qnn --shards N``: the decoder's layers in N QNN contexts per method
(``lowering.shards``), by default as many as keep each context's weights within half QNN's 2 GiB
graph limit; the runner's contract unchanged (the same methods, inputs and outputs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from qnn_custom_ops.cli import main
from qnn_custom_ops.errors import UsageError
from qnn_custom_ops.lowering.program import _layer_shards
from qnn_custom_ops.lowering.shards import (
    WEIGHT_BUDGET,
    LayerShards,
    layers_in,
    node_shards,
    shards_within,
    weight_bytes_per_layer,
)

from tests.conftest import shared_build

transformers = pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from tests.llm.exports import export, save_checkpoint  # noqa: E402  (after the dev extra)

MB = 10**6


class _Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8, bias=False)

    def forward(self, x):
        return x + self.proj(x)


class _Decoder(torch.nn.Module):
    """An embedding, three layers and a head, named as Hugging Face's decoders are."""

    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(20, 8)
        self.layers = torch.nn.ModuleList(_Layer() for _ in range(3))
        self.lm_head = torch.nn.Linear(8, 20, bias=False)

    def forward(self, tokens):
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(x)


def test_the_layers_split_evenly_and_every_edge_goes_forward():
    assert LayerShards.even(28, 3).sizes() == (10, 9, 9) and LayerShards.even(2, 2).sizes() == (1, 1)
    program = torch.export.export(_Decoder(), (torch.zeros(1, 4, dtype=torch.long),))
    assert layers_in(program.graph) == 3
    shards = node_shards(program.graph, LayerShards.even(3, 2).of_layer)
    assert all(shards[i] <= shards[n] for n in shards for i in n.all_input_nodes)
    by_module = {n.meta["nn_module_stack"] and list(n.meta["nn_module_stack"].values())[-1][0]: shards[n]
                 for n in shards if n.meta.get("nn_module_stack")}
    assert by_module == {"embed_tokens": 0, "layers.0.proj": 0, "layers.0": 0, "layers.1.proj": 0, "layers.1": 0,
                         "layers.2.proj": 1, "layers.2": 1, "lm_head": 1}
    # float weights at HTP's 16 bits: the embedding counted with the first layer, lm_head with the last
    assert weight_bytes_per_layer(program) == (2 * (20 * 8 + 64), 2 * 64, 2 * (64 + 8 * 20))
    said: list[str] = []
    assert _layer_shards({"forward": program}, 2, said.append).sizes() == (2, 1)
    assert _layer_shards({"forward": program}, None, said.append) is None  # 1 KB: one context
    assert said == ["lowering: 2 QNN contexts per method (--shards): layers 2, 1, weights 0.0, 0.0 MB",
                    "lowering: 1 QNN context per method (as many as keep each context's weights within 1 GiB): "
                    "layers 3, weights 0.0 MB"]
    with pytest.raises(UsageError, match="give 1 to 3, the model's layers"):
        _layer_shards({"forward": program}, 4, said.append)


def test_the_default_shard_count_keeps_each_contexts_weights_within_the_budget():
    assert WEIGHT_BUDGET == 2**30  # half QNN's 2 GiB graph allocation limit (ExecuTorch #17782)
    assert shards_within([10 * MB, 10 * MB]).count == 1
    # Qwen3-1.7B at 16a8w, the model of #17782 (2.31 GB estimated in one context, over the limit):
    # 28 layers of 50 MB of 8-bit weights, its 16-bit embedding (622 MB) in the first, lm_head
    # (311 MB) in the last: three contexts, the largest as small as three allow
    qwen3 = [672 * MB] + [50 * MB] * 26 + [361 * MB]
    assert shards_within(qwen3).sizes() == (3, 16, 9)
    assert shards_within(qwen3).held(qwen3) == (772 * MB, 800 * MB, 761 * MB)
    # Llama-3.1-8B's shape at 16a4w: layer 0 with the 1.05 GB embedding is over the budget alone
    # and a context of its own; the rest fill four
    layer = (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336) // 2
    eight_b = [layer + 128256 * 4096 * 2] + [layer] * 30 + [layer + 128256 * 4096]
    assert shards_within(eight_b).sizes() == (1, 9, 9, 9, 4)
    assert max(shards_within(eight_b).held(eight_b)[1:]) <= WEIGHT_BUDGET
    assert shards_within([600 * MB] * 4).count == 4  # two layers (1.2 GB) pass the budget


def cli_error(capsys, *argv: str) -> str:
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse's own refusals
        code = exit_.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err


def test_shards_that_cannot_work_are_one_line(tmp_path, capsys):
    checkpoint = str(shared_build("llm-checkpoint", save_checkpoint))  # one layer
    out = str(tmp_path / "out")
    qnn = ("--target", "qnn", "--soc", "SM8650")
    assert "--shards splits a QNN program into contexts of layers: give --target qnn too" in cli_error(
        capsys, "llm", "export", checkpoint, "-o", out, "--shards", "2")
    assert "argument --shards: '0' is not a whole number of 1 or more" in cli_error(
        capsys, "llm", "export", checkpoint, "-o", out, *qnn, "--shards", "0")
    assert "--shards 2: the model has 1 layers; give 1 to 1" in cli_error(
        capsys, "llm", "export", checkpoint, "-o", out, *qnn, "--shards", "2")
    from qnn_custom_ops.llm.checkpoint import export_checkpoint

    for shards, target, message in ((2, "host", "give --target qnn too"), (0, "qnn", "1 or more"),
                                    (2, "qnn", "the model has 1 layers")):
        with pytest.raises(UsageError, match=message):
            export_checkpoint(Path(checkpoint), tmp_path / "out", target=target, soc="SM8650", shards=shards)
    assert not (tmp_path / "out").exists()


def _delegates(pte: bytes) -> dict[str, list[str]]:
    from executorch.exir._serialize._program import deserialize_pte_binary

    plans = getattr(deserialize_pte_binary(pte), "program", None) or deserialize_pte_binary(pte)
    return {plan.name: [d.id for d in plan.delegates] for plan in plans.execution_plan}


@pytest.mark.slow
def test_a_two_shard_qnn_export_has_two_contexts_per_method_and_generates_the_host_programs_tokens(
        tmp_path_factory, capfd, monkeypatch):
    """A two-layer 16a8w model, one layer a context, the cut tensors passed as uint16 codes: on
    the x86 HTP simulator, the host program's tokens (what the one-shard QNN export gives too)."""
    from qnn_custom_ops.llm.manifest import LlmManifest
    from qnn_custom_ops.llm.text_generation import generate_text, load_export
    from qnn_custom_ops.runtime import method_specs

    checkpoint = shared_build("llm-checkpoint-2-layers", lambda root: save_checkpoint(root, layers=2))
    text = tmp_path_factory.mktemp("calibration") / "prompts.txt"
    text.write_text("The host runtime runs the program.\nqnn-custom-ops llm export\nA kernel for the HTP\n")

    quantized = ("--quant", "16a8w", "--calibration", str(text))
    host = export(checkpoint, "llm-export-2-layers-16a8w", *quantized)
    sharded = export(checkpoint, "llm-export-2-layers-16a8w-qnn-2-shards", *quantized, "--target", "qnn", "--soc",
                     "SM8650", "--shards", "2")
    pte = (sharded / "model.pte").read_bytes()
    delegates = _delegates(pte)
    assert delegates["prefill_forward"] == delegates["kv_forward"] == ["QnnBackend", "QnnBackend"]
    host_pte = (host / "model.pte").read_bytes()
    for method in ("prefill_forward", "kv_forward"):  # the runner's contract: the same inputs and outputs
        assert [tuple(s.shape) for s in method_specs(pte, method)[0]] == [
            tuple(s.shape) for s in method_specs(host_pte, method)[0]]
    assert LlmManifest.read(sharded).encodings == LlmManifest.read(host).encodings

    prompt = "A kernel for the HTP runs the program"  # longer than one prefill chunk
    want = generate_text(load_export(host), prompt, 12)
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    capfd.readouterr()
    assert main(["llm", "generate", str(sharded), "--prompt", prompt, "--max-new-tokens", "12",
                 "--json"]) == 0
    got = json.loads(capfd.readouterr().out)
    assert got["ids"] == want.tokens
