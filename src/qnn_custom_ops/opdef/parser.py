"""Read OpDef XML safely into the model: bytes -> checked tree -> frozen dataclasses."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from lxml import etree

from .checks import check_op, check_package_ops, check_supplement_target
from .datatypes import DATATYPES
from .diagnostics import Reporter
from .identifiers import identifier_problem, is_argument_name, sanitize_identifier, scope_name_problem
from .model import (
    KNOWN_BACKENDS,
    Constraint,
    Datatype,
    Default,
    DefaultValue,
    Layout,
    OpDef,
    OpPackage,
    Role,
    Shape,
    Supplement,
    TensorDef,
)

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_ELEMENTS = 100_000
_RANK = re.compile(r"(\d+)D?\Z")


@lru_cache(maxsize=1)
def _schema() -> etree.XMLSchema:
    xsd = resources.files(__package__).joinpath("opdef.xsd").read_bytes()
    return etree.XMLSchema(etree.fromstring(xsd, _secure_parser()))


def _secure_parser() -> etree.XMLParser:
    """No entities, no DTD, no network, no huge trees: hostile input stays inert."""
    return etree.XMLParser(
        resolve_entities=False,
        load_dtd=False,
        dtd_validation=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )


@dataclass(frozen=True)
class _SupplementalTensor:
    kind: Role
    name: str
    supplement: Supplement
    line: int


@dataclass(frozen=True)
class _SupplementalOp:
    backend: str
    op_name: str
    tensors: tuple[_SupplementalTensor, ...]
    file: str
    line: int


@dataclass(frozen=True)
class _ConfigFile:
    path: Path
    data: bytes
    package: str
    domain: str
    version: str
    line: int
    ops: tuple[OpDef, ...]
    supplements: tuple[_SupplementalOp, ...]
    supported_ops: tuple[tuple[str, int], ...]  # SupportedOps/OpName: (name, line)


def load_package(*paths: str | Path) -> OpPackage:
    """Read one or more OpDef configs of one package (merged, as the SDK does).

    Raises ``OpDefError`` listing every problem of every file; tolerated oddities are
    issued as ``OpDefWarning`` and kept in ``OpPackage.warnings``.
    """
    if not paths:
        raise TypeError("load_package() needs at least one config path")
    reporter = Reporter()
    return _package([_read_config(Path(p), reporter) for p in paths], reporter)


def parse_package(data: bytes, source: str) -> OpPackage:
    """A package from one config's bytes, checked exactly as ``load_package`` checks a file
    (a config about to be written, say); ``source`` names it in the diagnostics."""
    reporter = Reporter()
    return _package([_config_from(Path(source), data, reporter)], reporter)


def _package(configs: list[_ConfigFile | None], reporter: Reporter) -> OpPackage:
    read = [c for c in configs if c is not None]
    if not read:
        reporter.raise_if_errors()
    package = _merge(read, reporter)
    reporter.raise_if_errors()
    reporter.emit_warnings()
    return replace(package, warnings=tuple(str(w) for w in reporter.warnings))


def _read_config(path: Path, reporter: Reporter) -> _ConfigFile | None:
    try:
        data = read_bounded(path)
    except OSError as exc:
        reporter.error(path, 0, f"cannot read config: {exc.strerror or exc}", "check the path")
        return None
    if data is None:
        reporter.error(
            path, 1, f"config is over the {MAX_FILE_BYTES} byte limit", "split the package into several configs"
        )
        return None
    return _config_from(path, data, reporter)


def _config_from(path: Path, data: bytes, reporter: Reporter) -> _ConfigFile | None:
    root = _parse_tree(path, data, reporter)
    if root is None:
        return None
    ops = tuple(_read_op(el, path, reporter) for el in root.find("OpDefList").iterfind("OpDef"))
    supplements = tuple(
        entry
        for list_el in root.iterfind("SupplementalOpDefList")
        for entry in _read_supplement_list(list_el, path, reporter)
    )
    return _ConfigFile(
        path=path,
        data=data,
        package=root.get("PackageName").strip(),
        domain=(root.get("Domain") or "").strip(),
        version=(root.get("Version") or "").strip(),
        line=root.sourceline or 1,
        ops=ops,
        supplements=supplements,
        supported_ops=tuple(
            (_text(name), name.sourceline or 0) for name in root.iterfind("SupplementalOpDefList/SupportedOps/OpName")
        ),
    )


def read_bounded(path: Path) -> bytes | None:
    """The file's bytes, read once (a pipe such as /dev/stdin works) and never more than
    MAX_FILE_BYTES + 1 (a device such as /dev/zero cannot exhaust memory); None if over."""
    with path.open("rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    return data if len(data) <= MAX_FILE_BYTES else None


def _parse_tree(path: Path, data: bytes, reporter: Reporter) -> etree._Element | None:
    """Bytes to a schema-valid tree, or None with the reasons reported."""
    if not data.strip():
        reporter.error(path, 1, "config is empty", "write an <OpDefCollection> document")
        return None
    try:
        root = etree.fromstring(data, _secure_parser(), base_url=None)
    except etree.XMLSyntaxError as exc:
        line = exc.lineno or 1
        reporter.error(path, line, f"not well-formed XML: {exc.msg}", "fix the XML syntax")
        return None
    tree = root.getroottree()
    if tree.docinfo.doctype or tree.docinfo.internalDTD is not None:
        reporter.error(
            path,
            1,
            "DOCTYPE declarations are not allowed in an OpDef config",
            "remove the <!DOCTYPE ...> and any entity declarations",
        )
        return None
    if sum(1 for _ in root.iter()) > MAX_ELEMENTS:
        reporter.error(
            path, 1, f"config has more than {MAX_ELEMENTS} elements", "split the package into several configs"
        )
        return None
    schema = _schema()
    if not schema.validate(root):
        for entry in schema.error_log:
            reporter.error(
                path,
                entry.line,
                _schema_message(entry.message),
                "follow the element order and counts of the QNN OpDef schema",
            )
        return None
    return root


def _schema_message(message: str) -> str:
    """lxml's messages start with "Element 'X':"; keep them, drop the schema jargon."""
    return message.replace("This element is not expected. Expected is", "unexpected here; expected")


def _text(el: etree._Element | None, default: str = "") -> str:
    return " ".join((el.text or "").split()) if el is not None else default


def _bool(el: etree._Element | None, default: bool) -> bool:
    return default if el is None else _text(el).lower() in ("true", "1")


def _description(el: etree._Element) -> str:
    desc = el.find("Description")
    if desc is None:
        return ""
    return " ".join(_text(part) for part in desc if _text(part))


def _read_op(el: etree._Element, path: Path, reporter: Reporter) -> OpDef:
    name = _text(el.find("Name"))
    line = el.find("Name").sourceline
    problem = identifier_problem(name)
    if problem:
        reporter.error(
            path, line, f"op name {name!r} cannot become a C++ identifier or file name: {problem}", "rename the op"
        )
    backends = tuple(_read_backend(b, path, reporter) for b in el.iterfind("SupportedBackend"))
    return OpDef(
        name=name,
        description=_description(el),
        inputs=tuple(_read_tensor(t, Role.INPUT, name, path, reporter) for t in el.iterfind(Role.INPUT.xml_tag)),
        outputs=tuple(_read_tensor(t, Role.OUTPUT, name, path, reporter) for t in el.iterfind(Role.OUTPUT.xml_tag)),
        params=tuple(_read_tensor(t, Role.PARAM, name, path, reporter) for t in el.iterfind(Role.PARAM.xml_tag)),
        backends=backends,
        use_default_translation=_bool(el.find("UseDefaultTranslation"), False),
        references=tuple((r.get("Source", ""), r.get("Url", "")) for r in el.iterfind("Reference")),
        file=str(path),
        line=el.sourceline or 0,
    )


def _read_backend(el: etree._Element, path: Path, reporter: Reporter) -> str:
    backend = _text(el).upper()
    if backend not in KNOWN_BACKENDS:
        reporter.error(
            path, el.sourceline, f"unknown SupportedBackend {_text(el)!r}", f"use one of {', '.join(KNOWN_BACKENDS)}"
        )
    return backend


def _read_datatypes(el: etree._Element, op: str, path: Path, reporter: Reporter) -> tuple[Datatype, ...]:
    found: list[Datatype] = []
    for dt_el in el.iterfind("Datatype"):
        datatype = Datatype.parse(_text(dt_el))
        if datatype is None:
            reporter.error(
                path,
                dt_el.sourceline,
                f"op {op}: unknown datatype {_text(dt_el)!r}",
                "use a QNN_DATATYPE_* name such as QNN_DATATYPE_FLOAT_32",
            )
        elif datatype in found:
            reporter.warning(
                path,
                dt_el.sourceline,
                f"op {op}: datatype {datatype.value} listed twice",
                "remove the repeated <Datatype>",
            )
        else:
            found.append(datatype)
    return tuple(found)


def _read_layout(el: etree._Element | None, op: str, path: Path, reporter: Reporter) -> Layout | None:
    if el is None:
        return None
    try:
        return Layout(_text(el).upper())
    except ValueError:
        reporter.error(
            path,
            el.sourceline,
            f"op {op}: unknown layout {_text(el)!r}",
            f"use one of {', '.join(layout.value for layout in Layout)}",
        )
        return None


def _read_shape(el: etree._Element, op: str, path: Path, reporter: Reporter) -> Shape:
    rank_el = el.find("Rank")
    rank_text = _text(rank_el).upper()
    rank: int | None = None
    if rank_text == "SCALAR":
        rank = 0
    elif rank_text != "ND":
        match = _RANK.match(rank_text)
        if match is None:
            reporter.error(
                path,
                rank_el.sourceline,
                f"op {op}: unknown rank {_text(rank_el)!r}",
                "use SCALAR, 0D..5D, ND or a number of dimensions",
            )
        else:
            rank = int(match.group(1))
    layout = _read_layout(el.find("Layout"), op, path, reporter) or Layout.UNDEFINED
    return Shape(rank=rank, layout=layout, text=_text(el.find("Text")))


def _read_constraints(el: etree._Element) -> tuple[Constraint, ...]:
    return tuple(Constraint(c.get("id", ""), c.get("Type", ""), _text(c)) for c in el.iterfind("Constraint"))


def _read_tensor(el: etree._Element, kind: Role, op: str, path: Path, reporter: Reporter) -> TensorDef:
    name_el = el.find("Name")
    name = _text(name_el)
    c_name = name if is_argument_name(name) else sanitize_identifier(name)
    if c_name != name:
        reporter.warning(
            path,
            name_el.sourceline,
            f"op {op}: {kind} name {name!r} cannot be a C++ identifier ({scope_name_problem(name)}); "
            f"generated code uses {c_name!r}",
            "rename it",
        )
    datatypes = _read_datatypes(el, op, path, reporter)
    shape = _read_shape(el.find("Shape"), op, path, reporter)
    enum_values = tuple(_text(e) for e in el.iterfind("Enumeration/Enum"))
    tensor = TensorDef(
        kind=kind,
        name=name,
        c_name=c_name,
        description=_description(el),
        mandatory=_bool(el.find("Mandatory"), True),
        datatypes=datatypes,
        shape=shape,
        repeated=_bool(el.find("Repeated"), False),
        is_static=_bool(el.find("IsStaticTensor"), False),
        enum_values=enum_values,
        constraints=_read_constraints(el),
        line=name_el.sourceline or 0,
    )
    default_el = el.find("Default")
    if default_el is None:
        return tensor
    default = Default(_text(default_el), _parse_default(_text(default_el), tensor))
    out_of_range = _out_of_range(default.text, tensor) if default.value is None else None
    if out_of_range:
        reporter.error(
            path,
            default_el.sourceline,
            f"op {op}: default {default.text!r} of {kind} {name!r} does not fit "
            f"{'/'.join(d.short_name for d in datatypes)}: {out_of_range}",
            "write a default the datatype can hold, or widen the <Datatype>",
        )
    elif default.value is None:
        reporter.warning(
            path,
            default_el.sourceline,
            f"op {op}: default {default.text!r} of {kind} {name!r} is not a "
            f"{'/'.join(d.short_name for d in datatypes) or 'known'} value; "
            "it is kept for documentation and never emitted into generated code",
            "write the default as a literal value",
        )
    return replace(tensor, default=default)


def _parse_default(text: str, tensor: TensorDef) -> DefaultValue | None:
    """The default as a Python value of the tensor's datatype, or None if it does not parse."""
    if tensor.is_enum:
        if text in tensor.enum_values:
            return tensor.enum_values.index(text)
        return _parse_scalar(text, Datatype.INT_32)
    if tensor.shape.rank not in (None, 0) and not any(d == Datatype.STRING for d in tensor.datatypes):
        items = [item for item in re.split(r"[\s,]+", text.strip("[]{}() ")) if item]
        values = [_parse_first(item, tensor.datatypes) for item in items]
        return None if any(v is None for v in values) else tuple(values)
    return _parse_first(text, tensor.datatypes)


def _parse_first(text: str, datatypes: tuple[Datatype, ...]) -> DefaultValue | None:
    for datatype in datatypes:
        value = _parse_scalar(text, datatype)
        if value is not None:
            return value
    return None


def _parse_scalar(text: str, datatype: Datatype) -> DefaultValue | None:
    lowered = text.strip().lower()
    if datatype == Datatype.BOOL_8:
        return {"true": True, "false": False, "1": True, "0": False}.get(lowered)
    if datatype == Datatype.STRING:
        return text
    if datatype.is_integer:
        try:
            value = int(lowered, 0)
        except ValueError:
            return None
        low, high = datatype.integer_range
        return value if low <= value <= high else None
    if datatype.is_float or datatype.is_fixed_point:
        try:
            real = float(lowered)
        except ValueError:
            return None
        limit = DATATYPES[datatype].float_max or float("inf")
        return real if real == real and abs(real) != float("inf") and abs(real) <= limit else None
    return None


def _out_of_range(text: str, tensor: TensorDef) -> str | None:
    """Why a number that is a default of a scalar param fits none of its datatypes (the
    ranges), or None when the text is no number at all (a tolerated oddity such as ``N-1``)."""
    if tensor.is_enum or tensor.shape.rank not in (None, 0):
        return None
    try:
        number = float(text.strip())
    except ValueError:
        return None
    ranges = []
    for datatype in tensor.datatypes:
        if datatype == Datatype.BOOL_8:
            ranges.append("BOOL_8 takes true, false, 1 or 0")
        elif datatype.is_integer:
            low, high = datatype.integer_range
            ranges.append(f"{datatype.short_name} takes integers {low}..{high}")
        elif datatype.is_float:
            limit = DATATYPES[datatype].float_max
            ranges.append(f"{datatype.short_name} takes finite numbers up to {limit:g} in magnitude")
    return "; ".join(ranges) + f" ({number:g} given)" if ranges else None


def _read_supplement_list(el: etree._Element, path: Path, reporter: Reporter) -> list[_SupplementalOp]:
    backend = el.get("Backend").strip().upper()
    return [
        _SupplementalOp(
            backend=backend,
            op_name=_text(op_el.find("Name")),
            tensors=tuple(
                _SupplementalTensor(
                    kind,
                    _text(t_el.find("Name")),
                    _read_supplement(t_el, _text(op_el.find("Name")), path, reporter),
                    t_el.sourceline or 0,
                )
                for kind in Role
                for t_el in op_el.iterfind(kind.xml_tag)
            ),
            file=str(path),
            line=op_el.sourceline or 0,
        )
        for op_el in el.iterfind("SupplementalOpDef")
    ]


def _read_supplement(el: etree._Element, op: str, path: Path, reporter: Reporter) -> Supplement:
    shape_el = el.find("Shape")
    text_el = shape_el.find("Text") if shape_el is not None else None
    only_default = el.find("OnlyDefaultSupported")
    quant = el.find("QuantParam")
    return Supplement(
        datatypes=_read_datatypes(el, op, path, reporter),
        layout=_read_layout(shape_el.find("Layout") if shape_el is not None else None, op, path, reporter),
        text=_text(text_el) if text_el is not None else None,
        constraints=_read_constraints(el),
        only_default_supported=None if only_default is None else _bool(only_default, False),
        quant_param=None if quant is None else etree.tostring(quant, encoding="unicode"),
    )


def _merge(configs: list[_ConfigFile], reporter: Reporter) -> OpPackage:
    """One package from several configs; their names, domains and versions must agree."""
    first = configs[0]
    for config in configs[1:]:
        for attr, xml_name in (("package", "PackageName"), ("domain", "Domain"), ("version", "Version")):
            if getattr(config, attr) != getattr(first, attr):
                reporter.error(
                    config.path,
                    config.line,
                    f"{xml_name} {getattr(config, attr)!r} differs from {getattr(first, attr)!r} in {first.path}",
                    "configs merged into one package must share PackageName, Domain and Version",
                )
    problem = scope_name_problem(first.package)
    if problem:
        reporter.error(
            first.path,
            first.line,
            f"PackageName {first.package!r} cannot become a C++ namespace and file name: {problem}",
            "rename the package",
        )
    ops = [op for config in configs for op in config.ops]
    check_package_ops(ops, reporter)
    by_name = {op.name: op for op in ops}
    supplements: dict[str, dict[str, dict[str, Supplement]]] = {}
    for entry in (e for config in configs for e in config.supplements):
        op = by_name.get(entry.op_name)
        if op is None:
            reporter.error(
                entry.file,
                entry.line,
                f"SupplementalOpDef names unknown op {entry.op_name!r}",
                "use the Name of an OpDef in this package",
            )
            continue
        per_op = supplements.setdefault(entry.op_name, {}).setdefault(entry.backend, {})
        for tensor in entry.tensors:
            if check_supplement_target(op, tensor.kind, tensor.name, entry.file, tensor.line, reporter):
                per_op[tensor.name] = tensor.supplement
    for config in configs:
        for name, line in config.supported_ops:
            if name not in by_name:
                reporter.error(
                    config.path,
                    line,
                    f"SupportedOps names unknown op {name!r}",
                    "use the Name of an OpDef in this package",
                )
    merged: dict[str, OpDef] = {}
    for op in ops:
        frozen = {b: MappingProxyType(t) for b, t in supplements.get(op.name, {}).items()}
        op = replace(op, supplements=MappingProxyType(frozen))
        check_op(op, reporter)
        merged.setdefault(op.name, op)
    return OpPackage(
        name=first.package,
        domain=first.domain,
        version=first.version,
        ops=MappingProxyType(merged),
        paths=tuple(c.path for c in configs),
        sources=tuple(c.data for c in configs),
    )
