"""PT2E annotation of bound custom ops, derived from what their OpDef allows on the HTP.

Activations the OpDef allows as fixed point get the activation spec of the requested
``quant_dtype`` (executorch's own configs and observers); ``IsStaticTensor`` inputs get
the weight spec; integer and bool inputs are never quantized; float-only tensors stay
float, and the node says so explicitly (annotated, with no spec for them). Multi-output
ops get one spec per output, on their ``getitem`` users. A spec the OpDef cannot take
raises ``QuantAnnotationError`` -- never a silent fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import torch
from executorch.backends.qualcomm.quantizer.quantizer import QUANT_CONFIG_DICT, QuantDtype
from torchao.quantization.pt2e.quantizer import (
    QuantizationAnnotation,
    QuantizationSpec,
    QuantizationSpecBase,
    SharedQuantizationSpec,
)
from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

from ..errors import ReportedError, UsageError
from ..opdef import HTP, Datatype, Role, TensorDef
from ..torch_bridge import OpBinding, OpPackageBinding, node_arguments, output_carrier, target_op_name

QUANT_DTYPES = {
    "8a8w": QuantDtype.use_8a8w,
    "16a8w": QuantDtype.use_16a8w,
    "16a16w": QuantDtype.use_16a16w,
    "16a4w": QuantDtype.use_16a4w,
}
#: node.meta key listing the tensors of a custom op node left float on purpose.
FLOAT_TENSORS_KEY = "qco_float_tensors"


class QuantAnnotationError(ReportedError, ValueError):
    """The requested quantization needs a datatype the OpDef does not allow."""


@dataclass(frozen=True)
class Share:
    """An override value: share the encoding of this op's input or output ``index``."""

    kind: Role | str  # Role.INPUT or Role.OUTPUT ("input", "output" compare equal)
    index: int


#: Override values: a spec, a ``Share``, or None to keep the tensor float.
Override: TypeAlias = QuantizationSpecBase | Share | None
#: Per QNN op type: {(Role.INPUT | Role.OUTPUT, index) or tensor name: Override} ("input"/"output" too).
Overrides = Mapping[str, Mapping[tuple | str, Override]]


def quant_dtype_of(name: str) -> QuantDtype:
    try:
        return QUANT_DTYPES[name]
    except KeyError:
        raise UsageError(f"unknown quant_dtype {name!r}: use one of {', '.join(QUANT_DTYPES)}") from None


def spec_datatype(spec: QuantizationSpec) -> Datatype:
    """The QNN datatype a quantization spec produces, from its integer range."""
    info = torch.iinfo(spec.dtype)
    low = info.min if spec.quant_min is None else spec.quant_min
    high = info.max if spec.quant_max is None else spec.quant_max
    return Datatype.fixed_point(low, high)


def _is_numeric_only(datatypes: tuple[Datatype, ...]) -> bool:
    """Integer or bool tensors (indices, position ids, masks): never quantized."""
    return bool(datatypes) and all(d.is_integer or d == Datatype.BOOL_8 for d in datatypes)


def _is_float_only(datatypes: tuple[Datatype, ...]) -> bool:
    return bool(datatypes) and all(d.is_float for d in datatypes)


def qat_supported(quant_dtype: str) -> bool:
    """Whether executorch has a quantization-aware training config for ``quant_dtype`` (fake
    quantization: 8a8w, 16a8w, 16a4w; not 16a16w)."""
    return (quant_dtype_of(quant_dtype), True) in QUANT_CONFIG_DICT


def _config(quant_dtype: str, qat: bool) -> Any:
    """executorch's config of ``quant_dtype``: observers, or with ``qat`` fake quantizers."""
    if qat and not qat_supported(quant_dtype):
        trainable = ", ".join(name for name in QUANT_DTYPES if qat_supported(name))
        raise UsageError(f"quantization-aware training has no {quant_dtype} config in executorch: use {trainable}")
    return QUANT_CONFIG_DICT[(quant_dtype_of(quant_dtype), qat)][0]()


class OpAnnotator:
    """Annotates every node of one bound op for one ``quant_dtype``; with ``qat`` its specs
    fake-quantize (``prepare_qat_pt2e``) where they would observe."""

    def __init__(self, binding: OpBinding, quant_dtype: str, overrides: Mapping[Any, Override], qat: bool = False):
        self.binding = binding
        self.quant_dtype = quant_dtype
        self.config = _config(quant_dtype, qat)
        self.overrides = dict(overrides)
        self._check_override_keys()
        for kind, tensors in ((Role.INPUT, binding.opdef.inputs), (Role.OUTPUT, binding.opdef.outputs)):
            for index, tensor in enumerate(tensors):
                self._checked(tensor, self.tensor_spec(kind, index))

    def _check_override_keys(self) -> None:
        op = self.binding.opdef
        valid: set[tuple[Role, int] | str] = {(Role.INPUT, i) for i in range(len(op.inputs))}
        valid |= {(Role.OUTPUT, i) for i in range(len(op.outputs))}
        valid |= {t.name for t in op.inputs + op.outputs}
        unknown = [k for k in self.overrides if k not in valid]
        if unknown:
            raise QuantAnnotationError(
                f"{op.name}: override keys {unknown} name no input or output "
                f"(use ('input', i), ('output', i) or one of "
                f"{', '.join(t.name for t in op.inputs + op.outputs)})"
            )
        for key, value in self.overrides.items():
            problem = self._override_value_problem(value)
            if problem:
                raise QuantAnnotationError(f"{op.name}: override {key!r} is {value!r}: {problem}")

    def _override_value_problem(self, value: Any) -> str | None:
        """Why an override value cannot be used (checked here: executorch would only assert later)."""
        op = self.binding.opdef
        if value is None or isinstance(value, QuantizationSpecBase):
            return None
        if not isinstance(value, Share):
            return "use a QuantizationSpec, Share(kind, index) or None (keep the tensor float)"
        count = {Role.INPUT.value: len(op.inputs), Role.OUTPUT.value: len(op.outputs)}.get(str(value.kind))
        if count is None:
            return "Share's kind is 'input' or 'output'"
        if not isinstance(value.index, int) or not 0 <= value.index < count:
            return f"{op.name} has {count} {value.kind}(s): share an index 0..{count - 1}"
        return None

    def _override(self, kind: Role, index: int, tensor: TensorDef) -> tuple[bool, Override]:
        for key in ((kind, index), tensor.name):
            if key in self.overrides:
                return True, self.overrides[key]
        return False, None

    def _default_spec(self, tensor: TensorDef) -> QuantizationSpec | None:
        """The spec the OpDef calls for, or None for a tensor that stays unquantized."""
        datatypes = self.binding.opdef.datatypes(tensor, HTP)
        if _is_numeric_only(datatypes) or _is_float_only(datatypes):
            return None
        return self.config.weight if tensor.is_static else self.config.input_activation

    def _checked(self, tensor: TensorDef, spec: Any) -> Any:
        if isinstance(spec, QuantizationSpec):
            allowed = self.binding.opdef.datatypes(tensor, HTP)
            produced = spec_datatype(spec)
            if produced not in allowed:
                raise QuantAnnotationError(
                    f"{self.binding.package_name}::{self.binding.opdef.name}: {tensor.kind} '{tensor.name}' would be "
                    f"{produced.short_name} under {self.quant_dtype}, but the OpDef allows only "
                    f"{', '.join(d.short_name for d in allowed)} on {HTP} (add {produced.value} to its "
                    "<Datatype>s and the kernel, choose another quant_dtype, or override this tensor)"
                )
        return spec

    def tensor_spec(self, kind: Role, index: int) -> Override:
        """The override or OpDef-derived spec of input/output ``index`` (a ``Share`` unresolved)."""
        op = self.binding.opdef
        tensor = (op.inputs if kind == Role.INPUT else op.outputs)[index]
        overridden, value = self._override(kind, index, tensor)
        return value if overridden else self._default_spec(tensor)

    def spec_for(self, kind: Role, index: int, node: torch.fx.Node) -> Any:
        """The spec of input/output ``index`` of ``node``, a ``Share`` resolved to its edge."""
        spec = self.tensor_spec(kind, index)
        return self._shared(spec, node) if isinstance(spec, Share) else spec

    def _shared(self, share: Share, node: torch.fx.Node) -> SharedQuantizationSpec:
        inputs = self._input_nodes(node)
        if share.kind == Role.INPUT and share.index < len(inputs) and inputs[share.index] is not None:
            return SharedQuantizationSpec((inputs[share.index], node))
        carrier = output_carrier(node, share.index, len(self.binding.opdef.outputs) > 1)
        if share.kind == Role.OUTPUT and carrier is not None:
            return SharedQuantizationSpec(carrier)
        raise QuantAnnotationError(
            f"{self.binding.opdef.name}: node {node.name} has no {share.kind} {share.index} to share an encoding with"
        )

    def _input_nodes(self, node: torch.fx.Node) -> list[torch.fx.Node | None]:
        values = node_arguments(self.binding, node)
        return [values[arg.schema_index] for arg in self.binding.inputs]

    def annotate(self, node: torch.fx.Node) -> None:
        """Annotate one node of the bound op (and its getitem users)."""
        input_map: dict[torch.fx.Node, Any] = {}
        float_tensors = []
        for index, source in enumerate(self._input_nodes(node)):
            if not isinstance(source, torch.fx.Node):
                continue
            spec = self.spec_for(Role.INPUT, index, node)
            if spec is None:
                float_tensors.append(self.binding.opdef.inputs[index].name)
            else:
                input_map[source] = spec
        outputs = self.binding.opdef.outputs
        multi = len(outputs) > 1
        output_specs = [self.spec_for(Role.OUTPUT, i, node) for i in range(len(outputs))]
        float_tensors += [out.name for out, spec in zip(outputs, output_specs) if spec is None]
        node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(
            input_qspec_map=input_map, output_qspec=None if multi else output_specs[0], _annotated=True
        )
        node.meta[FLOAT_TENSORS_KEY] = tuple(float_tensors)
        if multi:
            for index, spec in enumerate(output_specs):
                carrier = output_carrier(node, index, True)
                if carrier is not None:
                    carrier.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(output_qspec=spec, _annotated=True)


def quant_annotation(
    binding: OpPackageBinding, quant_dtype: str = "8a8w", overrides: Overrides | None = None, qat: bool = False
) -> Callable[[torch.fx.GraphModule], None]:
    """``(GraphModule) -> None`` for ``QnnQuantizer.add_custom_quant_annotations``: annotates
    every node of the binding's ops as its OpDef allows (``qat``: with fake quantizers)."""
    return make_annotation(binding.ops, quant_dtype, overrides, qat)


def make_annotation(
    bindings: Mapping[str, OpBinding],
    quant_dtype: str = "8a8w",
    overrides: Overrides | None = None,
    qat: bool = False,
) -> Callable[[torch.fx.GraphModule], None]:
    """The custom annotation function for ``QnnQuantizer.add_custom_quant_annotations``."""
    overrides = overrides or {}
    unknown = [t for t in overrides if t not in bindings]
    if unknown:
        raise QuantAnnotationError(f"overrides name ops that are not bound: {', '.join(unknown)}")
    annotators = {b.custom_op_name: OpAnnotator(b, quant_dtype, overrides.get(t, {}), qat) for t, b in bindings.items()}

    def annotate_custom_ops(graph_module: torch.fx.GraphModule) -> None:
        for node in graph_module.graph.nodes:
            if node.op == "call_function":
                annotator = annotators.get(target_op_name(node.target) or "")
                if annotator is not None:
                    annotator.annotate(node)

    annotate_custom_ops.__name__ = f"annotate_{'_'.join(bindings)}_{quant_dtype}{'_qat' if qat else ''}"
    return annotate_custom_ops


def io_quant_configs(
    binding: OpPackageBinding, quant_dtype: str = "8a8w", overrides: Overrides | None = None
) -> dict[torch._ops.OpOverload, Any]:
    """ExecuTorch's own custom-op annotation (``executorch.backends.qualcomm.custom_op``) with
    the OpDef-derived specs: per bound op, an ``IOQuantConfig`` keyed by argument position, for
    ``CustomOpsQuantAnnotator().register_annotation(op, config)``. A ``Share`` override names
    an edge of the graph, which an ``IOQuantConfig`` cannot hold: use ``make_quantizer`` then."""
    from executorch.backends.qualcomm.custom_op.annotator import IOQuantConfig

    overrides = overrides or {}
    configs = {}
    for qnn_type, op in binding.ops.items():
        annotator = OpAnnotator(op, quant_dtype, overrides.get(qnn_type, {}))
        specs = {
            Role.INPUT: {arg.schema_index: annotator.tensor_spec(Role.INPUT, i) for i, arg in enumerate(op.inputs)},
            Role.OUTPUT: {i: annotator.tensor_spec(Role.OUTPUT, i) for i in range(len(op.opdef.outputs))},
        }
        for role, by_index in specs.items():
            shared = [i for i, spec in by_index.items() if isinstance(spec, Share)]
            if shared:
                raise QuantAnnotationError(
                    f"{qnn_type}: {role} {shared[0]} shares another tensor's encoding (a Share override), which "
                    "ExecuTorch's IOQuantConfig cannot express; use qnn_custom_ops.make_quantizer for this op"
                )
        configs[op.overload] = IOQuantConfig(
            {i: spec for i, spec in specs[Role.INPUT].items() if spec is not None} or None,
            {i: spec for i, spec in specs[Role.OUTPUT].items() if spec is not None} or None,
        )
    return configs
