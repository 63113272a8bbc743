"""OpDef-derived quantizer annotation, through real PT2E (export, prepare, calibrate, convert)."""

from __future__ import annotations

import re

from collections import defaultdict

import pytest
import torch
from executorch.backends.qualcomm._passes.qnn_pass_manager import get_qnn_pass_manager_cls
from executorch.backends.qualcomm.builders.node_visitor_manager import generate_node_to_external_map
from executorch.backends.qualcomm.serialization.qc_schema import QnnExecuTorchBackendType
from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

import qnn_custom_ops as qco
from qnn_custom_ops.lowering import op_package_options
from qnn_custom_ops.lowering.op_builder import _EXECUTORCH_CUSTOM_OP
from qnn_custom_ops.lowering import OpPackageBuild
from qnn_custom_ops.quantizer import FLOAT_TENSORS_KEY, Share

from tests.conftest import DATA, sqnr_db
from tests.qnn_wrappers import all_op_wrappers, fake_op_package_library, qnn_edge_program, readback
from tests.torch_ops import pt2e_quantize as quantize
from tests.torch_ops import EXAMPLE_PACKAGE, MUL3, QUANT_OPS, QUANT_PACKAGE, ConvMul3

QD = torch.ops.quantized_decomposed
DQ_OPS = (QD.dequantize_per_tensor.default, QD.dequantize_per_tensor.tensor)
Q_OPS = (QD.quantize_per_tensor.default, QD.quantize_per_tensor.tensor)
U8 = (0, 255, torch.uint8)
U16 = (0, 65535, torch.int32)  # executorch keeps 16-bit activations in int32 with a uint16 range
FLOAT_ONLY, GATHER, SCALE_ROWS, HALVES = (QUANT_OPS[k] for k in ("FloatOnly", "GatherRows", "ScaleRows", "Halves"))


@pytest.fixture(scope="module")
def quant_binding():
    return qco.bind(QUANT_PACKAGE, QUANT_OPS)


@pytest.fixture(scope="module")
def mul3_binding():
    return qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})


def node_of(graph_module, target):
    (node,) = [n for n in graph_module.graph.nodes if n.target is target]
    return node


def qrange(node):
    """(quant_min, quant_max, dtype) of a Q or DQ node."""
    return tuple(node.args[3:6])


def assert_dequantized(source, expected_range):
    assert source.target in DQ_OPS, f"{source} is not a dequantize node"
    assert qrange(source) == expected_range


def assert_quantized_output(node, expected_range):
    (user,) = node.users
    assert user.target in Q_OPS, f"{node}'s output is not quantized"
    assert qrange(user) == expected_range


def report(label, reference, approximation):
    mae = (reference - approximation).abs().mean().item()
    sqnr = sqnr_db(reference, approximation)
    print(f"{label}: mean abs error {mae:.4g}, SQNR {sqnr:.1f} dB")
    return mae, sqnr


def samples_of(*shapes, count=8, seed=0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(*s, generator=generator, dtype=dtype) for s in shapes) for _ in range(count)]




@pytest.mark.slow
def test_mul3_8a8w_qdq_around_the_custom_op(mul3_binding):
    torch.manual_seed(0)
    model = ConvMul3().eval()
    samples = samples_of((1, 3, 8, 8))
    converted = quantize(model, samples, mul3_binding, "8a8w")
    mul3 = node_of(converted, MUL3)
    assert_dequantized(mul3.args[0], U8)
    assert mul3.args[0].args[0].target in Q_OPS and mul3.args[0].args[0].args[0].target is torch.ops.aten.conv2d.default
    assert_quantized_output(mul3, U8)
    test_input = samples_of((1, 3, 8, 8), seed=1, count=1)[0]
    _, sqnr = report("ConvMul3 8a8w vs float", model(*test_input), converted(*test_input))
    assert sqnr > 20


def test_16a8w_on_an_op_that_only_takes_8_bit_is_an_error(mul3_binding):
    with pytest.raises(qco.QuantAnnotationError) as info:
        qco.make_quantizer(mul3_binding, "16a8w")
    message = str(info.value)
    assert "ExampleOpPackage::ExampleCustomOp: input 'input' would be UFIXED_POINT_16 under 16a8w" in message
    assert "allows only FLOAT_32, UFIXED_POINT_8 on HTP" in message


class RowsModel(torch.nn.Module):
    """linear -> ScaleRows (static weight) -> Halves (two outputs) -> two consumers."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.weight = torch.nn.Parameter(torch.linspace(-1.0, 2.0, 8))

    def forward(self, x):
        low, high = HALVES(SCALE_ROWS(self.linear(x), self.weight))
        return low * 0.5, torch.relu(high)


@pytest.mark.parametrize("quant_dtype, act, weight, min_sqnr", [
    ("8a8w", U8, (-127, 127, torch.int8), 20),
    ("16a8w", U16, (0, 255, torch.uint8), 25),  # 8-bit weights bound it
])
@pytest.mark.slow
def test_static_weight_and_two_outputs(quant_dtype, act, weight, min_sqnr):
    # GatherRows takes 8-bit only, so 16a8w binds just the ops this model uses.
    binding = qco.bind(QUANT_PACKAGE, {t: QUANT_OPS[t] for t in ("ScaleRows", "Halves")})
    torch.manual_seed(0)
    model = RowsModel().eval()
    samples = samples_of((256, 8), count=4)  # calibration covers the test distribution
    converted = quantize(model, samples, binding, quant_dtype)
    scale_rows = node_of(converted, SCALE_ROWS)
    assert_dequantized(scale_rows.args[0], act)
    weight_dq = scale_rows.args[1]
    assert weight_dq.target in DQ_OPS and tuple(weight_dq.args[3:5]) == weight[:2]
    assert_quantized_output(scale_rows, act)
    halves = node_of(converted, HALVES)
    assert_dequantized(halves.args[0], act)
    getitems = sorted(halves.users, key=lambda n: n.args[1])
    assert [g.args[1] for g in getitems] == [0, 1]
    for getitem in getitems:
        assert_quantized_output(getitem, act)
    test_input = samples_of((256, 8), seed=1, count=1)[0]
    for index, (ref, got) in enumerate(zip(model(*test_input), converted(*test_input))):
        _, sqnr = report(f"RowsModel {quant_dtype} output {index} vs float", ref, got)
        assert sqnr > min_sqnr


@pytest.mark.slow
def test_two_outputs_keep_two_encodings(quant_binding):
    class Split(torch.nn.Module):
        def forward(self, x):
            low, high = HALVES(x)
            return low + 0, high + 0

    samples = [(torch.cat([torch.rand(2, 4) * 0.1, torch.rand(2, 4) * 10.0], dim=-1),) for _ in range(4)]
    converted = quantize(Split().eval(), samples, quant_binding)
    scales = [next(iter(g.users)).args[1] for g in sorted(node_of(converted, HALVES).users, key=lambda n: n.args[1])]
    assert scales[1] > 50 * scales[0]


@pytest.mark.slow
def test_integer_inputs_are_never_quantized(quant_binding):
    class Gather(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x, indices):
            return GATHER(self.linear(x), indices) * 2

    samples = [(torch.randn(6, 4), torch.tensor([0, 5, 2], dtype=torch.int32)) for _ in range(4)]
    converted = quantize(Gather().eval(), samples, quant_binding)
    gather = node_of(converted, GATHER)
    assert_dequantized(gather.args[0], U8)
    assert gather.args[1].op == "placeholder"  # the indices, straight from the input
    assert_quantized_output(gather, U8)


@pytest.mark.slow
def test_float_only_op_stays_float_and_says_so(quant_binding):
    class Float(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            return FLOAT_ONLY(self.linear(x))

    converted = quantize(Float().eval(), samples_of((2, 4)), quant_binding)
    float_only = node_of(converted, FLOAT_ONLY)
    assert float_only.meta[FLOAT_TENSORS_KEY] == ("x", "y")
    assert float_only.args[0].target in DQ_OPS  # receives the dequantized (float) linear output
    assert [u.op for u in float_only.users] == ["output"]  # its output is never quantized


def test_override_shares_the_input_encoding_with_the_output(quant_binding):
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.full((4,), 3.0))

        def forward(self, x):
            return SCALE_ROWS(x, self.weight) + 0

    overrides = {"ScaleRows": {("output", 0): Share("input", 0)}}
    converted = quantize(Scale().eval(), samples_of((2, 4)), quant_binding, overrides=overrides)
    scale_rows = node_of(converted, SCALE_ROWS)
    (output_q,) = scale_rows.users
    input_dq = scale_rows.args[0]
    assert output_q.args[1:5] == input_dq.args[1:5]  # same scale, zero point and range


def test_overrides_are_checked(quant_binding):
    with pytest.raises(qco.QuantAnnotationError, match="name no input or output"):
        qco.make_quantizer(quant_binding, "8a8w", {"ScaleRows": {("output", 3): None}})
    with pytest.raises(qco.QuantAnnotationError, match="not bound: Nope"):
        qco.make_quantizer(quant_binding, "8a8w", {"Nope": {}})
    with pytest.raises(ValueError, match="unknown quant_dtype '4a4w'"):
        qco.make_quantizer(quant_binding, "4a4w")


@pytest.mark.parametrize("value, message", [
    ("int8", "use a QuantizationSpec, Share"),
    (torch.int8, "use a QuantizationSpec, Share"),
    (Share("in", 0), "Share's kind is 'input' or 'output'"),
    (Share("input", 2), "has 2 input"),
    (Share("output", -1), "share an index 0..0"),
])
def test_an_override_value_that_cannot_be_used_is_refused_when_the_quantizer_is_made(quant_binding, value, message):
    with pytest.raises(qco.QuantAnnotationError, match=re.escape(message)) as caught:
        qco.make_quantizer(quant_binding, "8a8w", {"ScaleRows": {("output", 0): value}})
    assert str(caught.value).startswith("ScaleRows: override ('output', 0) is ")


def quantized_halves_program():
    """A model whose two Halves outputs have ranges ~[0, 0.1] and ~[0, 10], quantized 8a8w and
    prepared as QNN lowering prepares it."""
    class Split(torch.nn.Module):
        def forward(self, x):
            low, high = HALVES(x)
            return low + 0, high + 0

    binding = qco.bind(QUANT_PACKAGE, {"Halves": HALVES})
    generator = torch.Generator().manual_seed(0)
    samples = [(torch.cat([torch.rand(2, 4, generator=generator) * 0.1,
                           torch.rand(2, 4, generator=generator) * 10.0], dim=-1),) for _ in range(4)]
    converted = quantize(Split().eval(), samples, binding)
    program = qnn_edge_program(converted, samples[0])
    return binding, program


@pytest.fixture
def halves_builds(tmp_path):
    return [OpPackageBuild("HTP", "x86_64", fake_op_package_library(tmp_path, "QuantTestPackage"))]


@pytest.mark.slow
def test_two_outputs_keep_their_own_encodings_down_to_the_qnn_tensors(halves_builds):
    binding, program = quantized_halves_program()
    infos = op_package_options(binding, halves_builds).op_package_infos
    wrappers = all_op_wrappers(program, infos, binding)
    (halves,) = [w for w in wrappers if w.type == "Halves"]
    assert halves.package == "QuantTestPackage"
    low, high = halves.outputs
    assert low.datatype == high.datatype == "QNN_DATATYPE_UFIXED_POINT_8"
    assert low.encoding == high.encoding == "QNN_QUANTIZATION_ENCODING_SCALE_OFFSET"
    assert 0 < low.scale <= 0.1 / 255 and high.scale > 50 * low.scale  # ranges ~[0, 0.1] and ~[0, 10]
    assert halves.inputs[0].datatype == "QNN_DATATYPE_UFIXED_POINT_8" and halves.inputs[0].dims == [2, 8]
    # the consumers read each output with that output's encoding
    adds = [w for w in wrappers if w.type == "ElementWiseAdd"]
    assert sorted(a.inputs[0].scale for a in adds) == pytest.approx(sorted([low.scale, high.scale]))


@pytest.mark.slow
def test_executorchs_own_custom_op_visitor_shares_one_encoding(halves_builds):
    """Why ours exists: executorch's CustomOp reads the op node's quant attrs for every output,
    which AnnotateQuantAttrs overwrote with the last getitem's."""
    binding, program = quantized_halves_program()
    infos = op_package_options(binding, halves_builds).op_package_infos
    graph = get_qnn_pass_manager_cls(QnnExecuTorchBackendType.kHtpBackend)().transform_for_preprocess_pipeline(program)
    node = next(n for n in graph.graph.nodes if binding.op_for(n) is not None)
    visitor = _EXECUTORCH_CUSTOM_OP(infos[0], generate_node_to_external_map(program), program, False)
    low, high = readback(visitor.define_node(node, defaultdict(dict))).outputs
    assert low.scale == high.scale


@pytest.mark.slow
def test_executorchs_make_quantizer_accepts_our_annotation(mul3_binding):
    from executorch.backends.qualcomm.export_utils import make_quantizer

    quantizer = make_quantizer(custom_annotations=(qco.quant_annotation(mul3_binding, "8a8w"),))
    prepared = prepare_pt2e(torch.export.export(ConvMul3().eval(), samples_of((1, 3, 8, 8))[0]).module(), quantizer)
    mul3 = node_of(prepared, MUL3)
    assert mul3.args[0].op == "call_module" and "activation_post_process" in mul3.args[0].target


@pytest.mark.slow
def test_htp_fp16_op_stays_float(tmp_path):
    """An op declared for HTP_FP16 (the SDK builds it like HTP) takes its datatypes from the
    HTP_FP16 supplemental list: FLOAT_16 only, so 8a8w leaves it float."""
    package = qco.load_package(DATA / "htp_fp16.xml")
    ops = qco.define_torch_ops(package, "qco_test_fp16", {"HalfScale": lambda x, factor=2.0: x * factor})
    binding = qco.bind(package, {"HalfScale": ops["HalfScale"]})

    class Half(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            return ops["HalfScale"](self.linear(x))

    converted = quantize(Half().eval(), samples_of((2, 4)), binding)
    half = node_of(converted, ops["HalfScale"])
    assert half.meta[FLOAT_TENSORS_KEY] == ("x", "y")
    assert half.args[0].target in DQ_OPS


def test_preparing_a_multi_output_op_with_a_weight_logs_no_unresolved_quant_range(caplog):
    """executorch's QnnQuantizer asks every node's output range (to clamp infinite constants),
    twice for an op that takes a constant; a multi-output op has its output specs on its
    getitems, not on its node, and used to be logged as "Could not resolve quant range" twice."""
    import logging

    from qnn_custom_ops.llm_ops import llm_binding, llm_ops, llm_quant_overrides

    fused = llm_ops()["fused_add_rms_norm"]

    class Norm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, 8))

        def forward(self, x, residual):
            normed, summed = fused(x, residual, self.weight)
            return normed + summed

    inputs = (torch.randn(2, 8), torch.randn(2, 8))
    quantizer = qco.make_quantizer(llm_binding(), "16a8w", llm_quant_overrides())
    disabled = logging.root.manager.disable
    logging.disable(logging.NOTSET)  # a CLI test of this process may have silenced warnings
    try:
        with caplog.at_level(logging.WARNING):
            prepare_pt2e(torch.export.export(Norm(), inputs).module(), quantizer)
    finally:
        logging.disable(disabled)
    assert [r.getMessage() for r in caplog.records if "quant range" in r.getMessage()] == []


def test_executorchs_own_custom_op_annotator_with_io_quant_configs_quantizes_as_make_quantizer():
    """A user of ExecuTorch's CustomOpsQuantAnnotator gets the OpDef-derived specs: the same
    quantize/dequantize around each bound op as qnn_custom_ops.make_quantizer gives."""
    from executorch.backends.qualcomm.custom_op.annotator import CustomOpsQuantAnnotator
    from executorch.backends.qualcomm.quantizer.quantizer import QnnQuantizer
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from qnn_custom_ops.quantizer import quant_dtype_of

    binding, quant_dtype = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3}), "8a8w"  # the OpDef's 8 bits
    annotator = CustomOpsQuantAnnotator()
    for op, config in qco.io_quant_configs(binding, quant_dtype).items():
        annotator.register_annotation(op, config)
    theirs = QnnQuantizer()
    theirs.add_custom_quant_annotations((annotator.build_annotation_fn(),))
    theirs.set_default_quant_config(quant_dtype_of(quant_dtype))
    torch.manual_seed(0)
    samples = [(torch.randn(1, 3, 8, 8),) for _ in range(4)]

    def around_mul3(quantizer) -> list:
        prepared = prepare_pt2e(torch.export.export(ConvMul3().eval(), samples[0]).module(), quantizer)
        for sample in samples:
            prepared(*sample)
        graph = convert_pt2e(prepared).graph
        (node,) = [n for n in graph.nodes if n.target == MUL3]
        edges = [node.args[0], *node.users]
        return [(str(n.target), n.args[1:]) for n in edges]

    torch.manual_seed(1)
    ours = around_mul3(qco.make_quantizer(binding, quant_dtype))
    torch.manual_seed(1)
    assert around_mul3(theirs) == ours
    assert all("quantize" in target for target, _ in ours)


def test_a_share_override_cannot_become_an_io_quant_config():
    binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})
    with pytest.raises(qco.QuantAnnotationError, match=r"ExampleCustomOp: output 0 shares another tensor's encoding"):
        qco.io_quant_configs(binding, "8a8w", {"ExampleCustomOp": {("output", 0): qco.Share("input", 0)}})


class TiedTable(torch.nn.Module):
    """An embedding whose table is also the output projection's weight (a tied LLM head)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Embedding(64, 32)

    def forward(self, ids):
        return torch.nn.functional.linear(torch.tanh(self.table(ids)), self.table.weight)


@pytest.mark.slow  # four quantizations: kept out of the fast tier's 40 s
@pytest.mark.parametrize("mode, tables", [("16a8w", 1), ("16a4w", 1), ("8a8w", 2), ("16a16w", 2)])
def test_a_tied_table_is_quantized_once_where_its_gathered_rows_have_more_bits_than_its_weights(mode, tables):
    """One observer, one encoding (the linear's, a scale a row), one codes tensor for both uses;
    at equal bits (8a8w, 16a16w) re-quantizing the gathered rows would round them twice as coarsely
    again, so each use keeps its own."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    from qnn_custom_ops.llm_ops import llm_binding

    ids = (torch.randint(0, 64, (1, 12)),)
    model = TiedTable().eval()
    quantizer = qco.make_quantizer(llm_binding(), mode, per_channel_linear=True)
    prepared = prepare_pt2e(torch.export.export(model, ids).module(), quantizer)
    (table,) = [n for n in prepared.graph.nodes if n.op == "get_attr" and n.target == "table.weight"]
    assert len(table.users) == tables
    prepared(*ids)
    converted = convert_pt2e(prepared)
    codes = [n for n in converted.graph.nodes if n.op == "get_attr"
             and getattr(converted, str(n.target)).shape == (64, 32)]
    assert len(codes) == tables
    assert sqnr_db(model(*ids), converted(*ids)) > 15  # a quantization (4-bit rows: 18 dB), not noise
