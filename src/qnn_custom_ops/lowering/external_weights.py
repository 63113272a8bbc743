"""A host program's weights in one data file beside its ``.pte`` (ExecuTorch's ``.ptd``), each
stored once.

In a ``.pte`` a tied embedding is stored twice: the embedding's gather (a portable op) reads a
program constant, the delegated ``lm_head`` an XNNPACK blob of the same bytes, and the two live
in different parts of the file. Put both in one data file and ExecuTorch's named-data store keeps
equal bytes once, under both keys. Three things send them there: the emitter's
``external_constants`` (``weights_tag``), XNNPACK's ``delegate_constant_tag`` on the weight nodes
it serializes (``tag_weights_external``), and one name per value across methods
(``name_constants_apart``), as the data file names each program constant by its fully qualified
name.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.export import ExportedProgram

#: The tag, and so the one data file, of every weight of a program lowered with
#: ``external_weights=True``: program constants and XNNPACK's blobs alike.
WEIGHTS_TAG = "weights"


def weights_tag(node: torch.fx.Node) -> str:
    """``ExecutorchBackendConfig.external_constants``: every program constant to the data file."""
    return WEIGHTS_TAG


def tag_weights_external(program: ExportedProgram) -> None:
    """Mark the program's weights for XNNPACK to put in the data file: it reads
    ``meta["custom"]["delegate_constant_tag"]`` of the weight node it serializes, which the
    partition's copy of the graph keeps (ExecuTorch's ``delegate_external_constants_pass_unlifted``
    sets the same on an unlifted module's get_attr nodes, before export)."""
    signature = program.graph_signature
    weights = {
        *signature.inputs_to_parameters,
        *signature.inputs_to_buffers,
        *signature.inputs_to_lifted_tensor_constants,
    }
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in weights:
            node.meta.setdefault("custom", {})["delegate_constant_tag"] = WEIGHTS_TAG


def _same_value(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return (a.data_ptr() == b.data_ptr() and a.stride() == b.stride()) or torch.equal(a, b)


def name_constants_apart(programs: Mapping[str, ExportedProgram]) -> None:
    """Rename a method's constant to ``<method>.<name>`` where an earlier method holds another
    value under its name. The data file keeps one value a name, and ExecuTorch's emitter, given
    two, keeps the last without a word -- a quantized program's folded constants are numbered per
    method (``_prop_tensor_constant3`` of prefill need not be decode's)."""
    seen: dict[str, torch.Tensor] = {}
    for method, program in programs.items():
        mutated = set(program.graph_signature.buffers_to_mutate.values())
        for spec in program.graph_signature.input_specs:
            name = spec.target
            table = program.state_dict if name in program.state_dict else program.constants
            if name is None or name in mutated or not isinstance(table.get(name), torch.Tensor):
                continue
            if name in seen and not _same_value(seen[name], table[name]):
                spec.target = f"{method}.{name}"
                table[spec.target] = table.pop(name)
            seen.setdefault(spec.target, table[spec.target])
