"""Meaning checks on parsed ops: what the schema cannot say, each with its fix."""

from __future__ import annotations

from collections import Counter

from .diagnostics import Reporter
from .model import Datatype, OpDef, Role, TensorDef


def check_package_ops(ops: list[OpDef], reporter: Reporter) -> None:
    """Op names are unique across every config of the package, ignoring case: ``Foo`` and
    ``foo`` would share an Impl name and collide as files on case-insensitive file systems."""
    seen: dict[str, OpDef] = {}
    for op in ops:
        first = seen.get(op.name.lower())
        if first is None:
            seen[op.name.lower()] = op
        elif first.name == op.name:
            reporter.error(
                op.file,
                op.line,
                f"op {op.name} is defined twice (first at {first.file}:{first.line})",
                "rename or remove one of the definitions",
            )
        else:
            reporter.error(
                op.file,
                op.line,
                f"ops {first.name} ({first.file}:{first.line}) and {op.name} differ only in case: "
                "their files and Impl functions would collide",
                "rename one of them",
            )


def check_supplement_target(op: OpDef, kind: Role, tensor_name: str, file: str, line: int, reporter: Reporter) -> bool:
    """A SupplementalOpDef tensor must be one of the op's tensors, of the same kind."""
    op_name = op.name
    matches = [t for t in op.tensors if t.name == tensor_name]
    if not matches:
        reporter.error(
            file,
            line,
            f"op {op_name}: SupplementalOpDef names unknown {kind} {tensor_name!r}",
            f"use one of {', '.join(t.name for t in op.tensors)}",
        )
        return False
    if matches[0].kind != kind:
        reporter.error(
            file,
            line,
            f"op {op_name}: SupplementalOpDef lists {tensor_name!r} as {kind}, "
            f"but the OpDef declares it as {matches[0].kind}",
            f"move it under the matching <{matches[0].kind.xml_tag}>",
        )
        return False
    return True


def check_op(op: OpDef, reporter: Reporter) -> None:
    """Every rule of one op; all violations are reported."""
    _check_unique_names(op, reporter)
    for tensor in op.tensors:
        _check_tensor(op, tensor, reporter)
    _check_backend_resolution(op, reporter)


def _check_unique_names(op: OpDef, reporter: Reporter) -> None:
    seen: dict[str, TensorDef] = {}
    for tensor in op.tensors:
        other = seen.get(tensor.name)
        if other is not None:
            what = (
                f"{tensor.kind} {tensor.name!r} has the same name as an {other.kind}"
                if tensor.kind != other.kind
                else f"{tensor.kind} name {tensor.name!r} is used twice"
            )
            reporter.error(
                op.file,
                tensor.line,
                f"op {op.name}: {what}",
                "give every input, output and parameter of an op its own name",
            )
        seen.setdefault(tensor.name, tensor)
    c_names = Counter(t.c_name for t in op.tensors)
    for tensor in op.tensors:
        if c_names[tensor.c_name] > 1 and tensor.c_name != tensor.name:
            reporter.error(
                op.file,
                tensor.line,
                f"op {op.name}: {tensor.kind} {tensor.name!r} becomes {tensor.c_name!r} in C++, "
                "which another argument already uses",
                "rename one of them",
            )


def _check_tensor(op: OpDef, tensor: TensorDef, reporter: Reporter) -> None:
    where = f"op {op.name}: {tensor.kind} {tensor.name!r}"
    if tensor.kind is Role.OUTPUT and tensor.default is not None:
        reporter.error(op.file, tensor.line, f"{where} has a Default", "outputs never have a default: remove it")
    if tensor.repeated and op.htp_backend:
        reporter.error(
            op.file,
            tensor.line,
            f"{where} is Repeated, which the {op.htp_backend} backend does not support",
            "declare a fixed number of inputs, or drop HTP from SupportedBackend",
        )
    if tensor.is_enum and tensor.default is not None and isinstance(tensor.default.value, int):
        index = tensor.default.value
        if not 0 <= index < len(tensor.enum_values):
            reporter.error(
                op.file,
                tensor.line,
                f"{where} has default {tensor.default.text!r}, outside its {len(tensor.enum_values)} enum values",
                f"use an index from 0 to {len(tensor.enum_values) - 1} or one of {', '.join(tensor.enum_values)}",
            )
    if tensor.is_enum and len(set(tensor.enum_values)) != len(tensor.enum_values):
        reporter.error(op.file, tensor.line, f"{where} lists an Enum value twice", "make enum values unique")


def _check_backend_resolution(op: OpDef, reporter: Reporter) -> None:
    """Every tensor needs concrete datatypes on every backend the op supports."""
    for backend in op.backends:
        for tensor in op.tensors:
            if Datatype.BACKEND_SPECIFIC in op.datatypes(tensor, backend):
                reporter.error(
                    op.file,
                    tensor.line,
                    f"op {op.name}: {tensor.kind} {tensor.name!r} is BACKEND_SPECIFIC "
                    f"but backend {backend} does not resolve it",
                    f'add <SupplementalOpDefList Backend="{backend}"> with a SupplementalOpDef '
                    f"for {op.name} giving {tensor.name}'s Datatype",
                )
    for backend in op.supplements:
        if backend not in op.backends:
            reporter.warning(
                op.file,
                op.line,
                f"op {op.name}: SupplementalOpDefList for backend {backend} "
                f"is ignored, the op supports only {', '.join(op.backends)}",
                f"add <SupportedBackend>{backend}</SupportedBackend> or drop the supplement",
            )
