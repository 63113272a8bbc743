"""The OpDef model: frozen dataclasses built once by the parser, then trusted everywhere.

Nothing here parses XML; ``qnn_custom_ops.opdef.parser`` builds these objects only after
the config passed the schema and every semantic check.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TypeAlias

DATATYPE_PREFIX = "QNN_DATATYPE_"


class Datatype(str, enum.Enum):
    """A QNN datatype, by its full SDK name."""

    INT_8 = "QNN_DATATYPE_INT_8"
    INT_16 = "QNN_DATATYPE_INT_16"
    INT_32 = "QNN_DATATYPE_INT_32"
    INT_64 = "QNN_DATATYPE_INT_64"
    UINT_8 = "QNN_DATATYPE_UINT_8"
    UINT_16 = "QNN_DATATYPE_UINT_16"
    UINT_32 = "QNN_DATATYPE_UINT_32"
    UINT_64 = "QNN_DATATYPE_UINT_64"
    FLOAT_16 = "QNN_DATATYPE_FLOAT_16"
    FLOAT_32 = "QNN_DATATYPE_FLOAT_32"
    FLOAT_64 = "QNN_DATATYPE_FLOAT_64"
    SFIXED_POINT_4 = "QNN_DATATYPE_SFIXED_POINT_4"
    SFIXED_POINT_8 = "QNN_DATATYPE_SFIXED_POINT_8"
    SFIXED_POINT_16 = "QNN_DATATYPE_SFIXED_POINT_16"
    SFIXED_POINT_32 = "QNN_DATATYPE_SFIXED_POINT_32"
    UFIXED_POINT_4 = "QNN_DATATYPE_UFIXED_POINT_4"
    UFIXED_POINT_8 = "QNN_DATATYPE_UFIXED_POINT_8"
    UFIXED_POINT_16 = "QNN_DATATYPE_UFIXED_POINT_16"
    UFIXED_POINT_32 = "QNN_DATATYPE_UFIXED_POINT_32"
    BOOL_8 = "QNN_DATATYPE_BOOL_8"
    STRING = "QNN_DATATYPE_STRING"
    BACKEND_SPECIFIC = "QNN_DATATYPE_BACKEND_SPECIFIC"

    @classmethod
    def parse(cls, text: str) -> Datatype | None:
        """Accept ``QNN_DATATYPE_FLOAT_32`` and ``FLOAT_32``; None if neither."""
        name = text.strip().upper()
        if name.startswith(DATATYPE_PREFIX):
            name = name[len(DATATYPE_PREFIX) :]
        return cls.__members__.get(name)

    @classmethod
    def fixed_point(cls, low: int, high: int) -> Datatype:
        """The fixed-point datatype of an integer range: (0, 255) -> UFIXED_POINT_8, (-8, 7) -> SFIXED_POINT_4."""
        bits = max(high - low, 1).bit_length()
        width = next(w for w in (4, 8, 16, 32) if bits <= w)
        return cls[f"{'S' if low < 0 else 'U'}FIXED_POINT_{width}"]

    @property
    def short_name(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.name.startswith("FLOAT_")

    @property
    def is_fixed_point(self) -> bool:
        return "FIXED_POINT" in self.name

    @property
    def is_integer(self) -> bool:
        return self.name.startswith(("INT_", "UINT_"))

    @property
    def is_signed(self) -> bool:
        return self.name.startswith(("INT_", "SFIXED", "FLOAT_"))

    @property
    def integer_range(self) -> tuple[int, int]:
        """(lowest, highest) value of an integer or fixed-point datatype's storage."""
        bits = self.bits or 64
        return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if self.is_signed else (0, (1 << bits) - 1)

    @property
    def qnn_code(self) -> int | None:
        """The ``Qnn_DataType_t`` value: the kind in the high byte, the width as hex digits
        (FLOAT_32 = 0x0232); None for BACKEND_SPECIFIC, which is no QNN value."""
        kind = _QNN_KINDS.get(self.name.rsplit("_", 1)[0])
        return None if kind is None or self.bits is None else kind << 8 | int(str(self.bits), 16)

    @property
    def bits(self) -> int | None:
        tail = self.name.rsplit("_", 1)[-1]
        return int(tail) if tail.isdigit() else None


#: The kind byte of ``Qnn_DataType_t`` per datatype family.
_QNN_KINDS = {"INT": 0, "UINT": 1, "FLOAT": 2, "SFIXED_POINT": 3, "UFIXED_POINT": 4, "BOOL": 5, "STRING": 6}


class Layout(str, enum.Enum):
    NHWC = "NHWC"
    NCHW = "NCHW"
    NDHWC = "NDHWC"
    NONTRIVIAL = "NONTRIVIAL"
    UNDEFINED = "UNDEFINED"
    BACKEND_SPECIFIC = "BACKEND_SPECIFIC"


#: The backends an op package is built for as an HTP package; the QNN SDK builds HTP_FP16
#: packages (its ExampleOpPackageHtpFp16.xml) exactly like HTP ones.
HTP = "HTP"
HTP_BACKENDS = (HTP, "HTP_FP16")
KNOWN_BACKENDS = ("CPU", "GPU", "DSP", *HTP_BACKENDS, "LPAI")

#: A parsed default: bool, int, float, str (STRING params), or a tuple for rank-1 params.
DefaultValue: TypeAlias = bool | int | float | str | tuple


@dataclass(frozen=True)
class Default:
    """A ``Default`` element: ``value`` is None when the text does not parse (e.g. ``N-1``).

    Only ``value`` ever reaches generated code; ``text`` is kept for messages.
    """

    text: str
    value: DefaultValue | None


@dataclass(frozen=True)
class Shape:
    """``rank`` is the number of dimensions, 0 for SCALAR, None for ND."""

    rank: int | None
    layout: Layout = Layout.UNDEFINED
    text: str = ""


@dataclass(frozen=True)
class Constraint:
    id: str
    type: str
    text: str


class Role(str, enum.Enum):
    """What a tensor of an op is; its value is the word messages and override keys use."""

    INPUT = "input"
    OUTPUT = "output"
    PARAM = "param"

    @property
    def xml_tag(self) -> str:
        """The OpDef element declaring it: Input, Output, Parameter."""
        return {Role.INPUT: "Input", Role.OUTPUT: "Output", Role.PARAM: "Parameter"}[self]

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TensorDef:
    """An input, output or parameter of an op, as the OpDef declares it."""

    kind: Role
    name: str
    c_name: str  # ``name`` as a C++ identifier (differs only for tolerated odd names)
    description: str
    mandatory: bool
    datatypes: tuple[Datatype, ...]
    shape: Shape
    default: Default | None = None
    repeated: bool = False
    is_static: bool = False
    enum_values: tuple[str, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    line: int = field(default=0, compare=False)

    @property
    def is_scalar(self) -> bool:
        return self.shape.rank == 0

    @property
    def is_enum(self) -> bool:
        return bool(self.enum_values)


@dataclass(frozen=True)
class Supplement:
    """What a ``SupplementalOpDef`` overrides for one tensor on one backend."""

    datatypes: tuple[Datatype, ...] = ()
    layout: Layout | None = None
    text: str | None = None
    constraints: tuple[Constraint, ...] = ()
    only_default_supported: bool | None = None
    quant_param: str | None = None


@dataclass(frozen=True)
class OpDef:
    name: str
    description: str
    inputs: tuple[TensorDef, ...]
    outputs: tuple[TensorDef, ...]
    params: tuple[TensorDef, ...]
    backends: tuple[str, ...]
    use_default_translation: bool = False
    references: tuple[tuple[str, str], ...] = ()
    # backend -> tensor name -> supplement
    supplements: Mapping[str, Mapping[str, Supplement]] = field(default_factory=lambda: MappingProxyType({}))
    file: str = field(default="", compare=False)
    line: int = field(default=0, compare=False)

    @property
    def tensors(self) -> tuple[TensorDef, ...]:
        return self.inputs + self.outputs + self.params

    def tensor(self, name: str) -> TensorDef:
        for tensor in self.tensors:
            if tensor.name == name:
                return tensor
        raise KeyError(f"op {self.name!r} has no input, output or parameter named {name!r}")

    def datatypes(self, tensor: str | TensorDef, backend: str = "HTP") -> tuple[Datatype, ...]:
        """The datatypes ``backend`` accepts for a tensor (given by name or itself),
        supplemental lists applied."""
        tensor = self.tensor(tensor) if isinstance(tensor, str) else tensor
        supplement = self.supplements.get(self._flavour(backend), {}).get(tensor.name)
        if supplement is not None and supplement.datatypes:
            return supplement.datatypes
        return tensor.datatypes

    @property
    def htp_backend(self) -> str | None:
        """The HTP flavour this op supports (HTP first, then HTP_FP16), or None."""
        return next((b for b in HTP_BACKENDS if b in self.backends), None)

    def _flavour(self, backend: str) -> str:
        """The backend whose supplements apply: asked for HTP, an op declared for HTP_FP16
        only answers for HTP_FP16 (and the other way round), as the SDK builds both alike."""
        if backend in HTP_BACKENDS and backend not in self.backends and self.htp_backend:
            return self.htp_backend
        return backend

    def layout(self, tensor_name: str, backend: str = "HTP") -> Layout:
        supplement = self.supplements.get(self._flavour(backend), {}).get(tensor_name)
        if supplement is not None and supplement.layout is not None:
            return supplement.layout
        return self.tensor(tensor_name).shape.layout


@dataclass(frozen=True)
class OpPackage:
    """One op package: every op of every config that shares the ``PackageName``."""

    name: str
    domain: str
    version: str
    ops: Mapping[str, OpDef]
    paths: tuple[Path, ...]
    warnings: tuple[str, ...] = ()
    sources: tuple[bytes, ...] = field(default=(), compare=False, repr=False)  # each config as read, once

    @property
    def path(self) -> Path:
        """The (first) config this package was read from."""
        return self.paths[0]
