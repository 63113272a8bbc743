"""``lower``: a model with bound custom ops -> an ExecuTorch program, for the host or for QNN."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch
from executorch.backends.qualcomm._passes import BuildQuantIo, TagQuantIO
from executorch.backends.qualcomm._passes.qnn_pass_manager import get_qnn_pass_manager_cls
from executorch.backends.qualcomm.qnn_preprocess import QnnBackend
from executorch.backends.qualcomm.serialization.qc_schema import QnnExecuTorchBackendType
from executorch.backends.qualcomm.utils.constants import QCOM_PASS_ACTIVATE_KEY, QCOM_PASS_ARGS_KWARGS_DEFAULTS_KEY
from executorch.backends.qualcomm.utils.utils import qnn_edge_config
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import (
    EdgeCompileConfig,
    ExecutorchBackendConfig,
    ExecutorchProgramManager,
    to_edge_transform_and_lower,
)
from executorch.exir.passes import MemoryPlanningPass

from ..atomic_files import write_atomic
from ..errors import ReportedError, UsageError
from ..heap import garbage_given_back
from ..opdef import Datatype
from ..progress import Progress, silent
from ..torch_bridge import OpPackageBinding
from ..torch_bridge.quantized import Encoding, encoding_of, is_dequantize
from .block_linears import block_linears_as_convolutions
from .codes_width import CodesInTheirWidth
from .emulation import EmulatedOp, cast_int64_inputs, emulate_quantized
from .external_weights import constants_kept_as_views, name_constants_apart, tag_weights_external, weights_tag
from .folding import FoldQuantizedWeights
from .host_speed import LayoutOnCodes, UseHostSpeedKernels
from .lowering_progress import Stages, partitions_reported
from .op_builder import bound_visitors
from .partitioner import QnnCustomOpPartitioner
from .preflight import PreflightError, preflight
from .quantized_io import DelegatesTracedOnCodes, QuantizedIo, quantized_io
from .shards import (
    WEIGHT_BUDGET,
    LayerShards,
    check_shard_count,
    layers_in,
    shards_within,
    weight_bytes_per_layer,
)
from .weight_sharing import partitions_share_weights, share_equal_constants, weights_held_once

TARGETS = ("host", "qnn")
EMULATIONS = ("quantized", "float")


@dataclass(frozen=True)
class LoweredProgram:
    """A lowered program: the .pte, what each bound op computes on, and per method and program
    output the encoding of its last quantization (None for an unquantized output) -- the codes
    in which ``compare_outputs`` measures errors."""

    manager: ExecutorchProgramManager
    emulated: tuple[EmulatedOp, ...]
    method_encodings: Mapping[str, tuple[Encoding | None, ...]]

    @property
    def buffer(self) -> bytes:
        """The whole .pte in memory (ExecuTorch keeps it): a large program is better written
        with ``write_to``."""
        return self.manager.buffer

    def write_to(self, stream: BinaryIO) -> None:
        """The .pte written piece by piece: no copy of the program joined in memory."""
        self.manager.write_to_file(stream)

    @property
    def has_data_file(self) -> bool:
        """Whether the weights are in a data file beside the .pte (``external_weights=True``):
        the runtime then loads the .pte with it (``data_path``)."""
        return bool(self.manager._tensor_data)

    def write_data_to(self, stream: BinaryIO) -> None:
        """The data file (.ptd) of a program lowered with ``external_weights=True``, written
        piece by piece. ExecuTorch's manager writes it only straight into a directory
        (``write_tensor_data_to_file``), not staged as ``write_all_atomic`` needs, so its
        serialized form is read here."""
        if not self.has_data_file:
            raise UsageError("this program keeps its weights in its .pte: lower it with external_weights=True")
        (data,) = self.manager._tensor_data.values()  # one tag, WEIGHTS_TAG
        data.write_to_file(stream)

    @property
    def output_encodings(self) -> tuple[Encoding | None, ...]:
        """The encodings of ``forward``'s outputs (of the one method, when there is one)."""
        if len(self.method_encodings) == 1:
            return next(iter(self.method_encodings.values()))
        return self.method_encodings["forward"]


def output_encodings(program: torch.export.ExportedProgram) -> tuple[Encoding | None, ...]:
    """Per graph output, the encoding of the dequantize node producing it, else None."""
    (output,) = [n for n in program.graph.nodes if n.op == "output"]
    results = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    return tuple(encoding_of(r) if is_dequantize(r) else None for r in results)


def is_quantized(program: torch.export.ExportedProgram) -> bool:
    """True if the program carries PT2E quantize/dequantize nodes."""
    return any("quantized_decomposed" in str(n.target) for n in program.graph.nodes if n.op == "call_function")


def _prepare_host(
    exported: torch.export.ExportedProgram, binding: OpPackageBinding, emulate: str
) -> tuple[list, list[EmulatedOp]]:
    """The partitioners and emulated ops of the program QNN would run, for the host's kernels.

    int64 inputs of bound ops are cast to int32 as QNN's lowering does; every bound op is
    checked (arguments, datatypes against the OpDef) before anything is lowered; with
    ``emulate="quantized"`` each quantized bound op runs its kernel on the quantized tensors
    and encodings, as on the HTP. XNNPACK takes the standard ops of float models only: a
    QnnQuantizer-quantized model delegated to XNNPACK computes something else (QNN's int8
    weight and int32 bias conventions differ from XNNPACK's), while portable kernels
    reproduce the converted model.
    """
    cast_int64_inputs(exported, binding)
    problems = preflight(exported.graph_module, binding)
    if problems:
        raise PreflightError(problems)
    if not is_quantized(exported):
        return [XnnpackPartitioner()], []
    import executorch.kernels.quantized  # noqa: F401  (out variants of quantize/dequantize)

    return [], emulate_quantized(exported, binding) if emulate == "quantized" else []


def _host_passes(exported: torch.export.ExportedProgram, fold_weights: bool) -> list:
    """The edge passes of a host program: a quantized one's weights folded once, if
    ``fold_weights`` (``FoldQuantizedWeights``), its layout ops on codes without the dequantize/quantize pair
    around them (``LayoutOnCodes``), then its products and quantizes on the speed kernels of the
    same bits (``UseHostSpeedKernels``); a float one's ops are XNNPACK's."""
    if not is_quantized(exported):
        return []
    if not fold_weights and any("dequantize_affine" in str(n.target) for n in exported.graph.nodes):
        raise UsageError(
            "fold_weights=False: a block-wise dequantize of computed codes (torchao's dequantize_affine) has no "
            "host kernel; fold the weights, or quantize per channel (16a4w)"
        )
    return [*([FoldQuantizedWeights()] if fold_weights else []), LayoutOnCodes(), UseHostSpeedKernels()]


def qnn_edge_passes(pass_manager: Any, program: torch.export.ExportedProgram, io: QuantizedIo | None) -> list:
    """QNN's to-edge passes for ``program``, with ``io`` tagged as quantized IO (``TagQuantIO``)."""
    job = pass_manager.get_capture_program_passes()
    if io is not None:
        job[TagQuantIO][QCOM_PASS_ACTIVATE_KEY] = True
        job[TagQuantIO][QCOM_PASS_ARGS_KWARGS_DEFAULTS_KEY]["get_quant_io_dtype_fn"] = io.dtype_of
    return pass_manager.get_to_edge_transform_passes(program, passes_job=job)


def _lower_qnn(
    exported: Mapping[str, torch.export.ExportedProgram],
    binding: OpPackageBinding,
    compile_spec: list,
    constant_methods: dict[str, Any],
    io: Mapping[str, QuantizedIo | None],
    shards: LayerShards | None = None,
) -> Any:
    """QNN's own export and edge passes, our partitioner (cutting its partitions into ``shards``
    of layers), and our visitors for the bound ops while QNN builds its graph (executorch's own
    visitor is back afterwards); the partitions QNN compiles share the program's weights."""
    pass_manager = get_qnn_pass_manager_cls(QnnExecuTorchBackendType.kHtpBackend)()
    ready = {name: pass_manager.transform_for_export_pipeline(program) for name, program in exported.items()}
    with bound_visitors(binding), partitions_share_weights(QnnBackend):
        return to_edge_transform_and_lower(
            ready,
            transform_passes={name: qnn_edge_passes(pass_manager, p, io[name]) for name, p in ready.items()},
            partitioner=[QnnCustomOpPartitioner(compile_spec, binding, shards)],
            constant_methods=constant_methods,
            compile_config=qnn_edge_config(),
        )


def _codes_narrowed(module: torch.nn.Module, narrowed: CodesInTheirWidth) -> torch.nn.Module:
    """A converted program's weight codes in their own width (``codes_width``); a float one as it is."""
    return narrowed(module) if isinstance(module, torch.fx.GraphModule) else module


def _for_qnn(module: torch.nn.Module) -> torch.nn.Module:
    """A converted model as QNN computes it right: its per-block 4-bit linears as 1x1
    convolutions (``block_linears``)."""
    return block_linears_as_convolutions(module) if isinstance(module, torch.fx.GraphModule) else module


def _check_choices(
    target: str,
    emulate: str,
    compile_spec: list | None,
    codes_io: bool = False,
    external_weights: bool = False,
    shards: int | None = 1,
) -> None:
    if shards != 1 and target != "qnn":
        raise UsageError(f"shards={shards!r} is for target='qnn' (QNN contexts of layers); a host program is not split")
    if codes_io and target != "qnn":
        raise UsageError("codes_io=True is for target='qnn' (a device runner's codes); host programs take reals")
    if external_weights and target != "host":
        raise UsageError(
            "external_weights=True is for target='host': a QNN program's weights are in its context binary"
        )
    if target not in TARGETS:
        raise UsageError(f"unknown target {target!r}: use one of {', '.join(TARGETS)}")
    if emulate not in EMULATIONS:
        raise UsageError(f"unknown emulate {emulate!r}: use one of {', '.join(EMULATIONS)}")
    if target == "qnn" and compile_spec is None:
        raise UsageError("target='qnn' needs compile_spec=qnn_custom_ops.compile_spec(soc, binding, builds)")


def _exported(
    methods: Mapping[str, tuple[torch.nn.Module, Sequence[torch.Tensor]]], target: str, fold_weights: bool
) -> dict[str, torch.export.ExportedProgram]:
    """Each method exported (``torch.export``) as ``target`` lowers it: for QNN its block linears as
    convolutions (``_for_qnn``), on the host without ``fold_weights`` its codes in their own width
    (``_codes_narrowed``). The rewritten copies are not kept: their programs hold all they need."""
    if target == "qnn":
        methods = {name: (_for_qnn(m), inputs) for name, (m, inputs) in methods.items()}
    elif not fold_weights:
        narrowed = CodesInTheirWidth()
        methods = {name: (_codes_narrowed(m, narrowed), inputs) for name, (m, inputs) in methods.items()}
    return {name: _sources_named(torch.export.export(m, tuple(inputs))) for name, (m, inputs) in methods.items()}


def _sources_named(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """``program`` with each node's ``source_fn_stack`` naming its sources. Traced from a
    GraphModule, a node's entry can hold the traced module's own node where a name belongs, and
    every graph lowering makes from the program copies it: the traced graph, and the module owning
    it, stayed alive through lowering though nothing reads them after ``torch.export``."""
    for node in program.graph.nodes:
        if stack := node.meta.get("source_fn_stack"):
            node.meta["source_fn_stack"] = [
                (source.name if isinstance(source, torch.fx.Node) else source, fn) for source, fn in stack
            ]
    return program


def _releasable(methods: Mapping) -> MutableMapping:
    """``methods`` as the dict ``release_modules=True`` empties once exported; refused before any work."""
    if not isinstance(methods, MutableMapping):
        raise UsageError("release_modules=True empties methods once exported: pass them as a dict")
    return methods


def _edge_for_host(
    exported: dict[str, torch.export.ExportedProgram],
    binding: OpPackageBinding,
    emulate: str,
    fold_weights: bool,
    external_weights: bool,
    constant_methods: dict[str, Any],
    progress: Progress,
) -> tuple[Any, list[EmulatedOp]]:
    """The host's edge programs of ``exported`` (``lower_methods``' arguments) and the ops they emulate."""
    partitioners = {}
    emulated: list[EmulatedOp] = []
    for name, program in exported.items():
        partitioners[name], ops = _prepare_host(program, binding, emulate)
        emulated += ops
        if external_weights:
            tag_weights_external(program)
    with weights_held_once(), partitions_reported(progress):
        edge = to_edge_transform_and_lower(
            exported,
            transform_passes={n: _host_passes(p, fold_weights) for n, p in exported.items()},
            partitioner=partitioners,
            constant_methods=constant_methods,
            compile_config=EdgeCompileConfig(_check_ir_validity=False),
        )
    share_equal_constants(edge.exported_program(name) for name in exported)
    if external_weights:
        name_constants_apart({name: edge.exported_program(name) for name in exported})
    return edge, emulated


def lower_methods(
    methods: Mapping[str, tuple[torch.nn.Module, Sequence[torch.Tensor]]],
    binding: OpPackageBinding,
    target: str = "host",
    *,
    compile_spec: list | None = None,
    emulate: str = "quantized",
    constant_methods: Mapping[str, Any] | None = None,
    plan_outputs: bool = True,
    codes_io: bool = False,
    fold_weights: bool = True,
    external_weights: bool = False,
    shards: int | None = 1,
    release_modules: bool = False,
    progress: Progress = silent,
) -> LoweredProgram:
    """``lower`` for a program of several methods (``{name: (model, example_inputs)}``), with
    ``constant_methods`` (metadata a device runner reads, e.g. ``get_n_layers``). With
    ``plan_outputs=False`` outputs get no planned memory: a runner that hands each output its
    own buffer (``set_output``, as ExecuTorch's LLM runners do) needs that. ``codes_io=True``
    (QNN only): the inputs and outputs a converted model quantizes are passed as uint8/uint16
    codes (``quantized_io``), as ExecuTorch's LLM runners pass caches, masks and logits.
    ``fold_weights=False`` (host): a quantized program keeps its weights as codes, dequantized on
    every call -- the same results, slower, and a quarter of the float32 weights' memory (what a
    model whose float32 weights do not fit needs). ``external_weights=True`` (host): every weight
    goes to one data file beside the .pte (``write_data_to``), where equal bytes are stored once --
    a tied embedding's gather and the delegated ``lm_head`` read the same bytes. ``progress``
    hears each stage as it ends and, on the host, the partitions XNNPACK has compiled. ``shards``
    (QNN only): each method's decoder layers in that many QNN contexts of consecutive layers
    (``shards.LayerShards``); None: as many as keep each context's weights within
    ``shards.WEIGHT_BUDGET`` (``shards_within``), said to ``progress``. ``release_modules=True``:
    the caller gives the modules up, and ``methods`` (a dict) is emptied once they are exported, so
    the graphs nothing reads again are not held through the rest of lowering, where an export peaks."""
    _check_choices(target, emulate, compile_spec, codes_io, external_weights, shards)
    released = _releasable(methods) if release_modules else None
    stages = Stages(progress)
    exported = _exported(methods, target, fold_weights)
    if released is not None:
        released.clear()
        garbage_given_back()  # their graphs, before the edge passes make more
    stages.ended(f"{' and '.join(exported)} exported")
    encodings = {name: output_encodings(program) for name, program in exported.items()}
    emulated: list[EmulatedOp] = []
    if target == "host":
        edge, emulated = _edge_for_host(
            exported, binding, emulate, fold_weights, external_weights, dict(constant_methods or {}), progress
        )
    else:
        assert compile_spec is not None  # refused above
        io = {name: quantized_io(program) if codes_io else None for name, program in exported.items()}
        layer_shards = _layer_shards(exported, shards, progress)
        edge = _lower_qnn(exported, binding, compile_spec, dict(constant_methods or {}), io, layer_shards)
    del exported  # the ATen programs, graphs as large as the edge ones: not held while the program is emitted
    config = ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_output=plan_outputs),
        passes=[DelegatesTracedOnCodes(), BuildQuantIo()] if codes_io else [],
        external_constants=weights_tag if external_weights else False,
    )
    stages.ended("edge dialect, passes and delegation", then="emitting the program")
    # The graphs the edge passes replaced: emission, where an export peaks, starts 52 MB lower at 3B.
    garbage_given_back()
    with constants_kept_as_views() if external_weights else contextlib.nullcontext():
        manager = edge.to_executorch(config)
    stages.ended("program emitted")
    return LoweredProgram(manager, tuple(emulated), encodings)


def _layer_shards(
    exported: Mapping[str, torch.export.ExportedProgram],
    shards: int | None,
    progress: Progress,
) -> LayerShards | None:
    """The methods' layers in ``shards`` shards (None: as many as ``shards_within`` the weight
    budget), said; None for a program of one context."""
    first = next(iter(exported.values()))
    layers = layers_in(first.graph)
    if shards == 1 or (layers == 0 and shards is None):
        return None
    if layers == 0:
        raise UsageError(f"shards={shards!r}: the program has no decoder layers (modules named layers.N) to split")
    layer_bytes = weight_bytes_per_layer(first)
    if shards is not None:
        check_shard_count(shards, layers)
    split = shards_within(layer_bytes) if shards is None else LayerShards.even(layers, shards)
    budget = f"as many as keep each context's weights within {WEIGHT_BUDGET / 2**30:g} GiB"
    progress(
        f"lowering: {split.count} QNN context{'s' if split.count > 1 else ''} per method "
        f"({'--shards' if shards is not None else budget}): layers {', '.join(map(str, split.sizes()))}, "
        f"weights {', '.join(f'{b / 1e6:.1f}' for b in split.held(layer_bytes))} MB"
    )
    return split if split.count > 1 else None


def lower(
    model: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    binding: OpPackageBinding,
    target: str = "host",
    *,
    compile_spec: list | None = None,
    emulate: str = "quantized",
    output: str | Path | None = None,
) -> LoweredProgram:
    """Export and lower ``model`` (float, or converted by PT2E) and return the program manager.

    ``target="host"``: standard ops to XNNPACK (float models only), the custom ops to the
    host kernel library (``build_host_library``); for a quantized model each bound op runs
    its kernel's quantized branch on the quantized tensors as the HTP does
    (``emulate="quantized"``, the default), or its float branch between dequantize and
    quantize nodes (``emulate="float"``, for comparison), and its weights are dequantized
    once, when lowered (``FoldQuantizedWeights``), not on every call. ``target="qnn"``: the QNN
    partitioner with ``compile_spec`` (``compile_spec(soc, binding, builds)``), per-block 4-bit
    linears as 1x1 convolutions (``block_linears``); needs the QNN SDK, or a process started with
    ``simulator_environment()`` (QAIRT's x86 libraries), and says so in one line without either.
    ``output`` writes the .pte (atomically), and
    beside it ``<output>.encodings.json``, the outputs' quantization encodings.
    """
    program = lower_methods(
        {"forward": (model, example_inputs)}, binding, target, compile_spec=compile_spec, emulate=emulate
    )
    if output is not None:
        write_atomic(Path(output), program.write_to)
        if Path(output).is_file():  # not for a stream such as /dev/stdout
            sidecar = {"output_encodings": encodings_json(program)}
            write_atomic(encodings_file(Path(output)), json.dumps(sidecar).encode())
    return program


def encodings_json(program: LoweredProgram, method: str | None = None) -> list:
    """A method's output encodings (``forward``'s by default) as ``read_output_encodings`` reads them."""
    encodings = program.output_encodings if method is None else program.method_encodings[method]
    return [
        None if e is None else {"datatype": e.datatype.short_name, "scale": e.scale, "offset": e.offset}
        for e in encodings
    ]


class EncodingsFileError(ReportedError, ValueError):
    """A ``.encodings.json`` beside a program that cannot be read."""


def encodings_file(pte: Path) -> Path:
    """The sidecar of a .pte written by ``lower``: its outputs' quantization encodings, which
    ``qnn-custom-ops run`` compares in codes of."""
    return pte.with_name(pte.name + ".encodings.json")


def read_output_encodings(pte: Path) -> tuple[Encoding | None, ...] | None:
    """The encodings ``lower`` recorded beside ``pte``, or None if it recorded none."""
    path = encodings_file(pte)
    if not path.is_file():
        return None
    try:
        return tuple(
            None if e is None else Encoding(Datatype[e["datatype"]], float(e["scale"]), int(e["offset"]))
            for e in json.loads(path.read_text())["output_encodings"]
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise EncodingsFileError(
            f"{path}: not an encodings file written by lower(output=...) "
            f"({type(exc).__name__}: {exc}); write it again, or remove it to compare "
            "in absolute terms"
        ) from None
