"""A checkpoint read and quantized a layer at a time (``checkpoint_reading.load_by_layer``,
``layer_stages``): the same programs as the whole model gives, calibrated on the same values,
while holding one layer's float weights at a time."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import tokenizers
import torch
import transformers

from qnn_custom_ops.llm.checkpoint import programs_by_layer, static_programs
from qnn_custom_ops.llm.layer_stages import (
    calibrate_by_layer,
    calibration_calls,
    calibration_pass,
    put_tensor,
    quantize_by_layer,
    stages_of,
)
from qnn_custom_ops.llm.runner_loop import RunnerLoop
from qnn_custom_ops.llm.steps import eager_step

from tests.conftest import sqnr_db
from tests.hf_models import hf_model

PREFILL, CTX = 8, 32


def word_tokenizer(vocab: int) -> transformers.PreTrainedTokenizerFast:
    """A word-level tokenizer of ``vocab`` tokens: what a checkpoint directory must hold beside its weights."""
    words = {f"w{i}": i for i in range(vocab - 1)} | {"<unk>": vocab - 1}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="<unk>"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=model, eos_token="<unk>")


def save(directory: Path, arch: str, dtype: torch.dtype = torch.float32, **overrides: object) -> Path:
    model = hf_model(arch, **overrides).to(dtype)
    model.save_pretrained(directory)
    word_tokenizer(model.config.vocab_size).save_pretrained(directory)
    return directory


def filled(programs, weights) -> None:
    """Every offloaded weight read back into the static module (what lowering a float program needs)."""
    for name, _ in list(programs.prefill.module.named_parameters(remove_duplicate=False)):
        if name in weights:
            put_tensor(programs.prefill.module, name, weights.read(name))


@pytest.mark.parametrize("arch, dtype", [("llama", torch.bfloat16), ("gemma", torch.float32),
                                         ("phi3", torch.bfloat16), ("gemma3_text", torch.float32)])
def test_a_checkpoint_read_a_layer_at_a_time_gives_the_programs_the_whole_model_gives(tmp_path, arch, dtype):
    checkpoint = save(tmp_path / "checkpoint", arch, dtype)
    (tmp_path / "store").mkdir()
    model, _, _, whole = static_programs(checkpoint, PREFILL, CTX, None, lambda line: None)
    said = []
    _, _, _, by_layer, weights = programs_by_layer(checkpoint, tmp_path / "store", PREFILL, CTX, None, said.append)
    assert by_layer.swaps == whole.swaps and by_layer.shape == whole.shape
    layers = model.config.num_hidden_layers
    assert [line.split(" (")[0] for line in said[:layers]] == [f"read layer {i} of {layers}" for i in range(1, layers + 1)]
    names = dict(whole.prefill.module.named_parameters(remove_duplicate=False))
    assert all(name in weights for name in names), "every weight of the program is in the store"
    filled(by_layer, weights)
    torch.manual_seed(1)
    inputs = list(whole.prefill.example_inputs)
    inputs[0] = torch.randint(0, model.config.vocab_size, inputs[0].shape, dtype=torch.int32)
    for got, want in zip(by_layer.prefill.module(*inputs), whole.prefill.module(*inputs)):
        assert torch.equal(got, want)


def test_a_weight_not_yet_read_is_zeros_whatever_the_memory_held_so_annotation_sees_the_whole_models_graph(tmp_path):
    """ExecuTorch's QNN annotation passes read weight values (``RecomposeHadamard`` takes a square
    linear whose weight is a scaled Hadamard matrix for a ``hadamard_transform``): a stand-in that
    showed leftover bytes (near zero, one denormal) once replaced an ``o_proj`` at random."""
    from collections import Counter

    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from qnn_custom_ops.llm.quantization import llm_quantizer

    checkpoint = save(tmp_path / "checkpoint", "qwen3")
    (tmp_path / "store").mkdir()
    _, _, _, whole = static_programs(checkpoint, PREFILL, CTX, None, lambda line: None)
    shapes = [p.shape for p in whole.prefill.module.parameters()]
    leftovers = [torch.zeros(shape).index_fill_(-1, torch.tensor([1]), 1e-40) for shape in shapes * 4]
    del leftovers  # freed: blocks of the weights' sizes, near zero but for one denormal, for the allocator to hand out
    _, _, _, by_layer, _ = programs_by_layer(checkpoint, tmp_path / "store", PREFILL, CTX, None, lambda line: None)
    assert all(not p.any() for p in by_layer.prefill.module.parameters())

    def ops(programs) -> Counter:
        prepared = prepare_pt2e(programs.prefill.exported.module(), llm_quantizer("16a8w"))
        return Counter(str(n.target) for n in prepared.graph.nodes if n.op == "call_function")

    assert ops(by_layer) == ops(whole)


def observed(module: torch.fx.GraphModule) -> dict[str, tuple]:
    """Each observer's range, by name."""
    return {name: (o.min_val.clone(), o.max_val.clone()) for name, o in module.named_modules() if hasattr(o, "min_val")}


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "gemma"])  # gemma's table is tied: the gather's and the lm_head's
def test_calibrating_a_stage_at_a_time_observes_what_running_the_whole_programs_observes(tmp_path, arch):
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from qnn_custom_ops.llm.quantization import llm_quantizer

    checkpoint = save(tmp_path / "checkpoint", arch)
    (tmp_path / "store").mkdir()
    _, _, _, whole = static_programs(checkpoint, PREFILL, CTX, None, lambda line: None)
    _, _, _, by_layer, weights = programs_by_layer(checkpoint, tmp_path / "store", PREFILL, CTX, None, print)
    prompts = [[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], [2, 7, 1, 8]]

    def prepared(programs):
        return [prepare_pt2e(p.exported.module(), llm_quantizer("16a8w")) for p in (programs.prefill, programs.decode)]

    staged, run = prepared(by_layer), prepared(whole)
    stages = stages_of(staged[0], whole.shape.layers)
    layer_nodes = {n.name: s for n, s in stages.items() if n.op == "call_function"}
    layers = whole.shape.layers
    assert set(layer_nodes.values()) == set(range(layers + 2))  # the embedding, each layer, the head
    calls = calibration_calls(by_layer.shape, prompts, 6)
    calibrate_by_layer(staged, by_layer.shape, calls, weights, lambda line: None)
    loop = RunnerLoop(whole.shape, eager_step(run[0]), eager_step(run[1]))
    loop.log = []
    calibration_pass(loop, prompts, 6)
    assert [(c.phase, c.n_past, c.count, c.fresh) for c in loop.log] == [
        (c.phase, c.n_past, c.count, c.fresh) for c in calls]  # the calls logged without computing are the real ones
    assert all(torch.equal(a, b) for run_call, call in zip(loop.log, calls) for a, b in zip(run_call.inputs, call.inputs))
    for module_staged, module_run in zip(staged, run):
        got, want = observed(module_staged), observed(module_run)
        assert got.keys() == want.keys() and len(got) > 20
        for name in want:
            assert torch.equal(got[name][0], want[name][0]) and torch.equal(got[name][1], want[name][1]), name


@pytest.mark.slow
def test_each_stage_gives_back_the_float_weights_it_read_when_it_ends_a_tied_table_too(tmp_path):
    """Calibration holds one stage's float weights at a time: none read by a stage is alive when the
    stage ends, gemma's tied table (read by the gather, then again by the ``lm_head``) included."""
    from torch.multiprocessing.reductions import StorageWeakRef
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from qnn_custom_ops.llm.quantization import llm_quantizer

    checkpoint = save(tmp_path / "checkpoint", "gemma")
    (tmp_path / "store").mkdir()
    _, _, _, programs, weights = programs_by_layer(checkpoint, tmp_path / "store", PREFILL, CTX, None, print)
    prepared = [prepare_pt2e(p.exported.module(), llm_quantizer("16a8w")) for p in (programs.prefill, programs.decode)]
    read, alive_at_end = [], []
    read_weight = weights.read

    def recorded(name, rows=None):
        tensor = read_weight(name, rows)
        read.append((name, StorageWeakRef(tensor.untyped_storage())))
        return tensor

    def stage_ended(line):
        alive_at_end.append([name for name, storage in read if not storage.expired()])
        read.clear()

    weights.read = recorded
    calibrate_by_layer(prepared, programs.shape, calibration_calls(programs.shape, [[3, 1, 4, 1, 5]], 4), weights,
                       stage_ended)
    assert len(alive_at_end) == programs.shape.layers + 2
    assert alive_at_end == [[]] * len(alive_at_end)


@pytest.mark.slow
def test_a_model_quantized_a_layer_at_a_time_is_the_whole_model_quantized_on_the_same_calls(tmp_path):
    """Conversion reads each weight from the store as it makes its codes: the programs compute what
    the whole model's, calibrated on the same calls and converted alike, compute, bit for bit.
    (How the teacher-forced calls compare with the whole-model route's generated ones on a trained
    model: ``benchmarks/bench_llm_accuracy.py --by-layer``.)"""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from qnn_custom_ops.llm.conversion import convert_calibrated
    from qnn_custom_ops.llm.quantization import llm_quantizer

    checkpoint = save(tmp_path / "checkpoint", "qwen3")
    (tmp_path / "store").mkdir()
    _, _, _, whole = static_programs(checkpoint, PREFILL, CTX, None, lambda line: None)
    _, _, _, by_layer, weights = programs_by_layer(checkpoint, tmp_path / "store", PREFILL, CTX, None, print)
    prompts = [[5, 9, 2, 6, 5, 3, 5, 8, 9, 7], [3, 2, 3, 8]]
    for quant in ("16a8w", "16a4w_block"):
        got = quantize_by_layer(by_layer, weights, quant, prompts, 6, lambda line: None)
        prepared = [prepare_pt2e(p.exported.module(), llm_quantizer(quant)) for p in (whole.prefill, whole.decode)]
        calibration_pass(RunnerLoop(whole.shape, *(eager_step(m) for m in prepared)), prompts, 6)
        observers = [p.get_submodule(str(n.target)) for p in prepared for n in p.graph.nodes
                     if n.op == "call_module" and getattr(n.args[0], "op", None) == "get_attr"]
        want = convert_calibrated(prepared, whole.shape)
        assert observers and not any(hasattr(o, "min_val") for o in observers), quant  # ranges let go once read
        with pytest.raises((AssertionError, AttributeError), match="min_val"):
            observers[0].calculate_qparams()  # asked again: refused, never answered from nothing
        text = [7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5]
        scores = [RunnerLoop(whole.shape, *(eager_step(m) for m in programs)).score(text) for programs in (got, want)]
        assert torch.equal(*scores), quant
        assert sqnr_db(whole_float(whole, text), scores[0]) > 10, quant  # a quantization, not noise
        converted = [weakref.ref(program) for program in want]
        del want, prepared
        gc.collect()
        assert not any(ref() for ref in converted), quant  # no cache of torch's or torchao's keeps them


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["16a8w", "16a4w", "16a4w_block"])
def test_a_host_program_that_keeps_its_codes_converts_each_weight_straight_into_its_own_width(
    tmp_path, quant, monkeypatch
):
    """``narrow=True``, what an export whose host program keeps its codes converts with: each
    weight's codes are stored as the program of codes stores them as they are made, a few rows at a
    time, so none is held as PT2E makes them (4-bit in int8, the 16-bit embedding in int32), nor a
    whole weight in float32, and lowering copies none again (a linear layer's transposed); the
    programs compute what those converted wide and whole compute, bit for bit, eagerly and lowered
    as a program of codes, whose data file is no larger."""
    from qnn_custom_ops.llm import conversion
    from qnn_custom_ops.lowering.codes_width import CodesInTheirWidth

    from tests.hf_models import constant_bytes, host_program

    checkpoint = save(tmp_path / "checkpoint", "qwen3")
    (tmp_path / "store").mkdir()
    _, _, _, programs, weights = programs_by_layer(checkpoint, tmp_path / "store", PREFILL, CTX, None, print)
    prompts, quiet = [[5, 9, 2, 6, 5, 3, 5, 8, 9, 7], [3, 2, 3, 8]], lambda line: None
    wide = quantize_by_layer(programs, weights, quant, prompts, 6, quiet)
    monkeypatch.setattr(conversion, "_CHUNK_ELEMENTS", 3 * 64)  # 3 rows of 64 at a time; the tables' 32 rows 1 by 1
    block_scales_held, parameters_kept = [], []

    def stored(module, node):  # how many weights' PT2E block scales the program holds, as each is stored
        block_scales_held.append(sum(1 for name, t in vars(module)["_buffers"].items()
                                     if name.startswith("_scale") and t is not None and t.dim() >= 2))
        read = {str(a.target): weakref.ref(getattr(module, str(a.target)))
                for a in node.args[2:4] if isinstance(a, torch.fx.Node) and a.op == "get_attr"}
        store(module, node)
        left = {str(n.target) for n in module.graph.nodes if n.op == "get_attr"}
        parameters_kept.extend(name for name, ref in read.items() if name not in left and ref() is not None)

    store = conversion.dequantize_parameters_stored
    monkeypatch.setattr(conversion, "dequantize_parameters_stored", stored)
    narrow = quantize_by_layer(programs, weights, quant, prompts, 6, quiet, narrow=True)
    if quant == "16a4w_block":  # each weight's stored as soon as it is converted: one at a time, never a program's
        assert block_scales_held and max(block_scales_held) == 1, block_scales_held
        assert not parameters_kept, parameters_kept  # let go by the program: by the conversion too
    for narrowed, made in zip(narrow, wide):
        held, was = constant_bytes(narrowed), constant_bytes(made)
        assert torch.int32 not in {d for d, n in held.items() if n > 64} and held[torch.uint16] == was[torch.int32] // 2
        if quant == "16a8w":
            assert held[torch.int8] == was[torch.int8]
        else:
            assert held[torch.int8] < 0.6 * was[torch.int8]  # the 4-bit projections halved; lm_head's 8 bits kept
        if quant == "16a4w_block":  # block scales as uint8 steps of a unit a row, zero points (all 0) left out
            assert held[torch.float32] < 0.5 * was[torch.float32] and held[torch.uint8] > 0, (held, was)
        memory = {t.untyped_storage().data_ptr() for t in narrowed.state_dict().values()}
        rewritten = CodesInTheirWidth()(narrowed)
        copied = sum(t.nbytes for t in rewritten.state_dict().values() if t.untyped_storage().data_ptr() not in memory)
        assert copied < 0.1 * sum(held.values()), (copied, held)  # the block scales' uint8 steps, at most
    text = [7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5]
    scores = [RunnerLoop(programs.shape, *(eager_step(m) for m in converted)).score(text) for converted in (narrow, wide)]
    assert torch.equal(*scores)
    (got, got_bytes, _), (want, want_bytes, _) = (
        host_program(programs, converted, False, tmp_path / f"{name}.ptd") for name, converted in [("narrow", narrow), ("wide", wide)]
    )
    assert torch.equal(got, want) and got_bytes <= want_bytes, (got_bytes, want_bytes)


@pytest.mark.slow
def test_a_tied_table_is_converted_transposed_once_and_lowering_copies_none_of_it(tmp_path):
    """A tied table (gemma's), read by the gather and the ``lm_head``, converted for a program of
    codes is stored transposed as it is made, as the ``lm_head``'s product reads it, its gathers
    picking columns: narrowing for lowering then copies nothing (it made a transposed copy of the
    table, beside the table itself), and the programs compute what the wide ones do, bit for bit."""
    from qnn_custom_ops.lowering.codes_width import CodesInTheirWidth

    from tests.hf_models import host_program

    checkpoint = save(tmp_path / "checkpoint", "gemma", vocab_size=200)  # no other matrix of the table's size
    (tmp_path / "store").mkdir()
    model, _, _, programs, weights = programs_by_layer(checkpoint, tmp_path / "store", PREFILL, CTX, None, print)
    assert model.config.tie_word_embeddings
    vocab, hidden = model.config.vocab_size, model.config.hidden_size
    prompts, quiet = [[5, 9, 2, 6, 5, 3, 5, 8, 9, 7], [3, 2, 3, 8]], lambda line: None
    wide = quantize_by_layer(programs, weights, "16a8w", prompts, 6, quiet)
    narrow = quantize_by_layer(programs, weights, "16a8w", prompts, 6, quiet, narrow=True)
    narrowing = CodesInTheirWidth()
    for module in narrow:
        read = [getattr(module, str(n.target)) for n in module.graph.nodes if n.op == "get_attr"]
        assert [tuple(t.shape) for t in read if t.numel() == vocab * hidden] == [(hidden, vocab)]
        memory = {t.untyped_storage().data_ptr() for t in module.state_dict().values()}
        rewritten = narrowing(module)
        copied = [n for n, t in rewritten.state_dict().items() if t.untyped_storage().data_ptr() not in memory]
        assert not copied, copied
    text = [7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5]
    scores = [RunnerLoop(programs.shape, *(eager_step(m) for m in converted)).score(text) for converted in (narrow, wide)]
    assert torch.equal(*scores)
    (got, got_bytes, _), (want, want_bytes, _) = (  # lowered: the columns gathered by ExecuTorch's kernels
        host_program(programs, converted, False, tmp_path / f"{name}.ptd") for name, converted in [("narrow", narrow), ("wide", wide)]
    )
    assert torch.equal(got, want) and got_bytes <= want_bytes, (got_bytes, want_bytes)


def whole_float(programs, text: list[int]) -> torch.Tensor:
    return RunnerLoop(programs.shape, eager_step(programs.prefill.module), eager_step(programs.decode.module)).score(text)


PEAK = """
import json, sys, tempfile
from pathlib import Path
from qnn_custom_ops.llm.checkpoint_reading import load_by_layer, load_checkpoint

def status(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key + ":"))

open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) from here: the imports' left out
before = status("VmRSS")
if sys.argv[2] == "by-layer":
    with tempfile.TemporaryDirectory() as store:
        load_by_layer(Path(sys.argv[1]), Path(store))
else:
    load_checkpoint(Path(sys.argv[1]))
print(json.dumps(status("VmHWM") - before))
"""


@pytest.mark.slow
def test_reading_a_layer_at_a_time_holds_a_layer_not_the_model(tmp_path):
    checkpoint = save(tmp_path / "checkpoint", "llama", torch.bfloat16, hidden_size=512, intermediate_size=2048,
                      num_attention_heads=8, num_key_value_heads=8, num_hidden_layers=12)
    layer_bytes = 4 * (4 * 512 * 512 + 3 * 512 * 2048)  # float32
    grew = {}
    for how in ("whole", "by-layer"):
        out = subprocess.run([sys.executable, "-c", PEAK, str(checkpoint), how], capture_output=True, text=True,
                             check=True).stdout
        grew[how] = json.loads(out.strip().splitlines()[-1])
    assert grew["whole"] > 12 * layer_bytes, grew  # the model in float32 (and what both import)
    assert grew["whole"] - grew["by-layer"] > 9 * layer_bytes, grew  # a layer or so in float32


STORE_PEAK = """
import json, sys
from pathlib import Path
import torch
from safetensors.torch import load_file, save_file
from qnn_custom_ops.llm import checkpoint_reading
from qnn_custom_ops.llm.checkpoint_reading import OffloadedWeights, _CheckpointTensors, lazy_zeros

checkpoint_reading._READ_ELEMENTS = 1 << 20  # 2 MB of bfloat16 at a time
checkpoint, store = Path(sys.argv[1]) / "checkpoint", Path(sys.argv[1]) / "store"
checkpoint.mkdir(), store.mkdir()
save_file({"w": torch.randn(4096, 8192).to(torch.bfloat16)}, checkpoint / "model.safetensors")
holder = torch.nn.Module()
holder.w = torch.nn.Parameter(lazy_zeros((4096, 8192), torch.float32))  # as load_by_layer makes it
weights = OffloadedWeights(store)

def status(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key + ":"))

def grew(step):
    open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) from here
    before = status("VmRSS")
    result = step()
    return status("VmHWM") - before, result

read, _ = grew(lambda: _CheckpointTensors(checkpoint).fill([("w", holder.w)]))
float_bytes = holder.w.nbytes
stored, _ = grew(lambda: weights.offload([holder.w]))
weights.bind(holder)
read_back, weight = grew(lambda: weights.read("w"))
assert weight.dtype == torch.float32 and torch.equal(weight, load_file(checkpoint / "model.safetensors")["w"].float())
print(json.dumps({"read": read, "stored": stored, "read back": read_back, "float32": float_bytes}))
"""


@pytest.mark.slow  # a child process that imports torch (seconds): out of the fast tier
def test_a_weight_read_stored_and_read_back_holds_its_float32_copy_and_a_chunk_never_a_second_copy(tmp_path):
    """A checkpoint's bfloat16 weight read in float32 (``_CheckpointTensors.fill``), stored as
    bfloat16 (``OffloadedWeights.offload``) and read back (``read``) costs its float32 bytes and
    a chunk: never its file's pages, nor a whole copy in the file's width, beside them (a 3B model's
    tied table: 0.73 GiB more at each; reading it was that export's peak), and reads back the
    checkpoint's values."""
    out = subprocess.run([sys.executable, "-c", STORE_PEAK, str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    grew = json.loads(out.stdout.strip().splitlines()[-1])
    float_bytes = grew.pop("float32")
    assert float_bytes <= grew["read"] < 1.1 * float_bytes, grew  # whole, its bfloat16 copy's 0.5x more
    assert grew["stored"] < 0.1 * float_bytes, grew  # the float32 copy given back; a bfloat16 one was 0.5x more
    assert float_bytes <= grew["read back"] < 1.1 * float_bytes, grew  # whole, the file's 0.5x more


def test_weights_that_cannot_be_kept_on_disk_are_one_line_naming_the_directory_and_the_fix(tmp_path):
    from qnn_custom_ops.llm.checkpoint_reading import LlmCheckpointError, OffloadedWeights

    weights = OffloadedWeights(tmp_path / "gone")  # a store whose directory is not there: the write fails
    with pytest.raises(LlmCheckpointError) as raised:
        weights.offload([torch.nn.Parameter(torch.ones(3))])
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'gone'}: cannot keep the weights"), message
    assert "free space on that disk, or give -o a directory on another" in message


@pytest.mark.slow
def test_calibration_by_layer_can_give_each_layer_the_quantized_layers_outputs(tmp_path):
    """``inputs="quantized"`` runs each stage again as the converted program computes it before the
    next stage reads it: the embedding's observers see what the float route's see, every layer
    after sees other values, and the programs are a quantization of the model, not noise."""
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from qnn_custom_ops.llm.conversion import convert_calibrated
    from qnn_custom_ops.llm.quantization import llm_quantizer

    checkpoint = save(tmp_path / "checkpoint", "llama")
    (tmp_path / "store").mkdir()
    _, _, _, programs, weights = programs_by_layer(checkpoint, tmp_path / "store", PREFILL, CTX, None, print)
    calls = calibration_calls(programs.shape, [[5, 9, 2, 6, 5, 3, 5, 8, 9, 7], [3, 2, 3, 8]], 6)
    seen, converted = {}, {}
    for inputs in ("float", "quantized"):
        prepared = [prepare_pt2e(p.exported.module(), llm_quantizer("16a8w")) for p in (programs.prefill, programs.decode)]
        calibrate_by_layer(prepared, programs.shape, calls, weights, lambda line: None, inputs)
        seen[inputs] = (stages_of(prepared[0], programs.shape.layers), observed(prepared[0]))
        converted[inputs] = convert_calibrated(prepared, programs.shape, offloaded=weights)
    stages, ranges = seen["float"][0], {k: v[1] for k, v in seen.items()}
    moved: dict[int, bool] = {}
    for node, stage in stages.items():
        if node.op == "call_module" and str(node.target) in ranges["float"]:
            float_range, quantized_range = ranges["float"][str(node.target)], ranges["quantized"][str(node.target)]
            differs = not all(torch.equal(a, b) for a, b in zip(float_range, quantized_range))
            moved[stage] = moved.get(stage, False) or differs
    assert moved == {0: False, 1: True, 2: True, 3: True}, moved
    filled(programs, weights)
    text = [7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9, 0, 4, 5]
    score = RunnerLoop(programs.shape, *(eager_step(m) for m in converted["quantized"])).score(text)
    assert sqnr_db(whole_float(programs, text), score) > 10
    with pytest.raises(Exception, match="inputs='fake'; use one of float, quantized"):
        calibrate_by_layer(prepared, programs.shape, calls, weights, lambda line: None, "fake")
