"""The datatype table: one row per QNN datatype, every other datatype map derives from it.

A row says how one QNN datatype is represented everywhere we touch it: the portable kernel
ABI (``qco::DType``), the HTP's own ``::DType`` that carries it inside the NPU, C and numpy
storage, the torch dtype and the ``Qnn_Scalar_t`` member of a scalar parameter. Adding a
datatype is adding one row here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .model import Datatype

#: The HTP core's ``enum class DType`` (``HTP/core/dtype_enum.h``), in enumerator order.
HTP_DTYPES = (
    "UNKNOWN",
    "QUInt8",
    "QUInt16",
    "QInt16",
    "Float32",
    "Int32",
    "QInt32",
    "QInt8",
    "Float16",
    "Int64",
    "BFloat16",
)

#: QHPI's element types (``HTP/core/qhpi.h``): the HTP ``DType``s up to Int64, numbered alike.
QHPI_ELEMENT_TYPES = (
    "UNKNOWN",
    "QUINT8",
    "QUINT16",
    "QINT16",
    "FLOAT32",
    "INT32",
    "QINT32",
    "QINT8",
    "FLOAT16",
    "INT64",
)


@dataclass(frozen=True)
class DatatypeRow:
    """How one QNN datatype is stored and named on each side (None: not representable there)."""

    datatype: Datatype
    kernel: str | None = None  # qco::DType enumerator without its "k" (the kernel ABI tag)
    kernel_value: int | None = None  # its value: fixed forever, it is an ABI
    htp: str | None = None  # the HTP ::DType carrying it (several QNN datatypes share one)
    c_type: str | None = None
    numpy: str | None = None
    torch: str | None = None
    scalar_member: str | None = None  # Qnn_Scalar_t union member for a scalar parameter
    scalar_type: tuple[str, int] | None = None  # ExecuTorch (c10) ScalarType of a plain tensor: name, code
    pt2e_storage: str | None = None  # torch dtype PT2E (QnnQuantizer) stores a fixed-point tensor in
    float_max: float | None = None  # largest finite magnitude of a float datatype

    @property
    def kernel_tag(self) -> str:
        """``kernel`` of a row ``kernel_rows`` returns (it has one)."""
        if self.kernel is None:
            raise ValueError(f"{self.datatype.short_name} has no kernel ABI tag")
        return self.kernel

    @property
    def abi_value(self) -> int:
        """``kernel_value`` of a row ``kernel_rows`` returns."""
        if self.kernel_value is None:
            raise ValueError(f"{self.datatype.short_name} has no kernel ABI value")
        return self.kernel_value

    @property
    def numpy_type(self) -> str:
        """``numpy`` of a row ``kernel_rows`` returns (every kernel dtype has numpy storage)."""
        if self.numpy is None:
            raise ValueError(f"{self.datatype.short_name} has no numpy storage")
        return self.numpy


_ROWS = (
    DatatypeRow(Datatype.INT_8, "Int8", 10, "QInt8", "int8_t", "int8", "int8", "int8Value", ("Char", 1)),
    DatatypeRow(Datatype.INT_16, "Int16", 12, "QInt16", "int16_t", "int16", "int16", "int16Value", ("Short", 2)),
    DatatypeRow(Datatype.INT_32, "Int32", 6, "Int32", "int32_t", "int32", "int32", "int32Value", ("Int", 3)),
    DatatypeRow(Datatype.INT_64, "Int64", 8, "Int64", "int64_t", "int64", "int64", "int64Value", ("Long", 4)),
    DatatypeRow(Datatype.UINT_8, "UInt8", 11, "QUInt8", "uint8_t", "uint8", "uint8", "uint8Value", ("Byte", 0)),
    DatatypeRow(
        Datatype.UINT_16, "UInt16", 13, "QUInt16", "uint16_t", "uint16", "uint16", "uint16Value", ("UInt16", 27)
    ),
    DatatypeRow(Datatype.UINT_32, "UInt32", 7, "Int32", "uint32_t", "uint32", "uint32", "uint32Value", ("UInt32", 28)),
    DatatypeRow(Datatype.UINT_64, "UInt64", 17, "Int64", "uint64_t", "uint64", "uint64", "uint64Value", ("UInt64", 29)),
    DatatypeRow(
        Datatype.FLOAT_16,
        "Float16",
        1,
        "Float16",
        None,
        "float16",
        "float16",
        "floatValue",
        ("Half", 5),
        float_max=65504.0,
    ),
    DatatypeRow(
        Datatype.FLOAT_32,
        "Float32",
        0,
        "Float32",
        "float",
        "float32",
        "float32",
        "floatValue",
        ("Float", 6),
        float_max=3.4028234663852886e38,
    ),
    DatatypeRow(
        Datatype.FLOAT_64,
        "Float64",
        16,
        None,
        "double",
        "float64",
        "float64",
        "doubleValue",
        ("Double", 7),
        float_max=1.7976931348623157e308,
    ),
    DatatypeRow(Datatype.SFIXED_POINT_4),
    DatatypeRow(Datatype.SFIXED_POINT_8, "SFixed8", 3, "QInt8", "int8_t", "int8", "int8", pt2e_storage="int8"),
    DatatypeRow(Datatype.SFIXED_POINT_16, "SFixed16", 5, "QInt16", "int16_t", "int16", "int16", pt2e_storage="int16"),
    DatatypeRow(Datatype.SFIXED_POINT_32, "SFixed32", 14, "QInt32", "int32_t", "int32", "int32", pt2e_storage="int32"),
    DatatypeRow(Datatype.UFIXED_POINT_4),
    DatatypeRow(Datatype.UFIXED_POINT_8, "UFixed8", 2, "QUInt8", "uint8_t", "uint8", "uint8", pt2e_storage="uint8"),
    # PT2E keeps 16-bit activations in int32 with a uint16 range
    DatatypeRow(
        Datatype.UFIXED_POINT_16, "UFixed16", 4, "QUInt16", "uint16_t", "uint16", "uint16", pt2e_storage="int32"
    ),
    DatatypeRow(Datatype.UFIXED_POINT_32, "UFixed32", 15, None, "uint32_t", "uint32", "uint32"),
    DatatypeRow(Datatype.BOOL_8, "Bool", 9, "QUInt8", "bool", "bool_", "bool", "bool8Value", ("Bool", 11)),
    DatatypeRow(Datatype.STRING),
    DatatypeRow(Datatype.BACKEND_SPECIFIC),
)

DATATYPES: Mapping[Datatype, DatatypeRow] = MappingProxyType({row.datatype: row for row in _ROWS})


def kernel_rows() -> list[DatatypeRow]:
    """Rows with a kernel ABI tag, in ABI value order."""
    return sorted((r for r in _ROWS if r.kernel is not None), key=lambda r: r.abi_value)


def plain_datatype(torch_dtype: Any) -> Datatype | None:
    """The QNN datatype of an unquantized torch tensor (``torch.int32`` -> INT_32), or None."""
    name = str(torch_dtype).replace("torch.", "")
    return next((r.datatype for r in _ROWS if r.torch == name and not r.datatype.is_fixed_point), None)
