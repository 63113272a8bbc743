"""A quantized host program that keeps its weights as codes stores them in their own width
(issue 42, item 2; ``lowering.codes_width``): 4-bit codes two to a byte, 16-bit codes in 16
bits, a per-block dequantize written as its ops, so 16a4w_block runs as codes too, and the
embedding gathering its rows' codes before they are dequantized; the program computes what the
folded one does, bit for bit."""

from __future__ import annotations


import pytest
import torch

pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from qnn_custom_ops.llm import export_llm, quantize_llm  # noqa: E402
from qnn_custom_ops.llm.checkpoint import METHODS  # noqa: E402
from qnn_custom_ops.lowering.codes_width import CodesInTheirWidth, pack_int4, unpack_int4  # noqa: E402

from tests.hf_models import PROMPTS, constant_bytes, hf_model, host_program  # noqa: E402


@pytest.fixture(scope="module")
def programs():
    return export_llm(hf_model("qwen3", num_hidden_layers=2), prefill_len=8, ctx_len=32, cache="runner")


def test_4bit_codes_pack_two_to_a_byte_and_unpack_to_every_value_in_place():
    codes = torch.arange(-8, 8, dtype=torch.int8).repeat(3, 2)[:, torch.randperm(32)]
    packed = pack_int4(codes)
    assert packed.dtype == torch.int8 and packed.shape == (3, 16)
    assert torch.equal(unpack_int4(packed, tuple(codes.shape)), codes)


@pytest.mark.slow  # a quantization or lowering (seconds): kept out of the fast tier's 40 s
@pytest.mark.parametrize("quant", ["16a4w", "16a4w_block"])
def test_narrowed_programs_hold_packed_4bit_and_16bit_codes_and_compute_the_same(programs, quant):
    converted = quantize_llm(programs, quant, PROMPTS, 2)
    narrowed = CodesInTheirWidth()
    rewritten = [narrowed(module) for module in converted]
    for module, before in zip(rewritten, converted):
        after, was = constant_bytes(module), constant_bytes(before)
        assert torch.int32 not in {d for d, n in after.items() if n > 64} and after[torch.uint16] == was[torch.int32] // 2
        assert after[torch.int8] < was[torch.int8] * 0.6  # the 4-bit projections halved; lm_head's 8 bits kept
        assert "dequantize_affine" not in str(module.graph)
        if quant == "16a4w_block":  # the block scales as uint8 multiples of a unit a row
            assert after[torch.float32] < was[torch.float32] and after[torch.uint8] > was.get(torch.uint8, 0)
        gathers = [n for n in module.graph.nodes if n.target is torch.ops.aten.embedding.default]
        assert [getattr(module, str(n.args[0].target)).dtype for n in gathers] == [torch.uint16]  # codes gathered
    inputs = programs.prefill.example_inputs
    assert all(torch.equal(a, b) for a, b in zip(rewritten[0](*inputs), converted[0](*inputs)))
    stored = {name for name, _ in rewritten[0].named_buffers()}  # what export would lift and store
    read = {str(n.target) for n in rewritten[0].graph.nodes if n.op == "get_attr"}
    assert stored <= read, stored - read
    assert constant_bytes(narrowed(converted[1]))[torch.int8] == constant_bytes(rewritten[1])[torch.int8]


def folded_and_as_codes(programs, converted, tmp_path) -> tuple[dict, dict, dict]:
    """``host_program`` with the weights folded (True) and as codes (False)."""
    logits, sizes, planned = {}, {}, {}
    for fold in (True, False):
        logits[fold], sizes[fold], planned[fold] = host_program(programs, converted, fold, tmp_path / f"fold-{fold}.ptd")
    return logits, sizes, planned


@pytest.mark.slow
def test_a_16a4w_block_host_program_of_codes_runs_and_gives_the_folded_programs_bits(programs, tmp_path):
    """Refused before (no host kernel for torchao's per-block dequantize); now its data file is
    under 0.6x the folded program's and its logits are the folded program's, bit for bit. Each
    weight is dequantized where its layer uses it, so the memory plan holds a weight or two in
    float32 at a time, not the model (a 1B program of codes planned 4.6 GiB a method)."""
    converted = quantize_llm(programs, "16a4w_block", PROMPTS, 2)
    logits, sizes, planned = folded_and_as_codes(programs, converted, tmp_path)
    assert sizes[False] < 0.6 * sizes[True], sizes
    assert torch.equal(logits[False], logits[True])
    largest = 4 * max(p.numel() for p in programs.prefill.module.parameters())
    for method in METHODS:
        assert planned[False][method] - planned[True][method] <= 5 * largest, (planned, largest)


@pytest.mark.slow
def test_a_tied_embedding_is_one_table_of_8bit_codes_that_the_gather_and_the_lm_head_both_read(tmp_path):
    """Quantized once at the ``lm_head``'s encoding (8 bits a row; ``quantizer.tied_weights``),
    where the gather took 16-bit codes of its own: the host program of codes gathers each row's
    codes and scale, stores the table once, and gives the folded program's logits bit for bit."""
    model = hf_model("gemma")
    assert model.config.tie_word_embeddings
    tied = export_llm(model, prefill_len=8, ctx_len=32, cache="runner")
    converted = quantize_llm(tied, "16a8w", PROMPTS, 2)
    table = tuple(model.get_input_embeddings().weight.shape)
    for module in converted:
        tables = {str(n.target) for n in module.graph.nodes
                  if n.op == "get_attr" and tuple(getattr(module, str(n.target)).shape) == table}
        assert len(tables) == 1 and getattr(module, tables.pop()).dtype == torch.int8
        rewritten = CodesInTheirWidth()(module)  # stored transposed for the lm_head's matmul, gathered by column
        gathered = {str(n.args[0].target) for n in rewritten.graph.nodes
                    if n.target is torch.ops.aten.index_select.default and n.args[0].op == "get_attr"
                    and getattr(rewritten, str(n.args[0].target)).dtype == torch.int8}  # not the rows' scales
        dequantized = {str(n.args[0].target) for n in rewritten.graph.nodes
                       if "dequantize" in str(n.target) and n.args[0].op == "get_attr"}
        assert len(gathered) == 1 and gathered <= dequantized, (gathered, dequantized)
    logits, sizes, planned = folded_and_as_codes(tied, converted, tmp_path)
    assert torch.equal(logits[False], logits[True])
    largest = 4 * max(p.numel() for p in model.parameters())
    for method in METHODS:  # one float32 weight at a time: none transposed again on every call
        assert planned[False][method] - planned[True][method] <= 1.5 * largest, (planned, largest)
    layers = sum(p.numel() for n, p in model.named_parameters() if "layers." in n)
    assert sizes[False] < (table[0] * table[1] + layers) * 1.3, sizes  # the table's codes once, a byte each
