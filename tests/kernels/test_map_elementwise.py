"""qco::map_elementwise, an elementwise op's fast quantized branch without HVX code of its own:
docs/kernels.md's swish kernel computes the host's bits on Hexagon at every dtype, its 8-bit codes
are the float path's requantized, and its table is evaluated once per encoding."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import qnn_custom_ops as qco
from qnn_custom_ops.generator import generate
from qnn_custom_ops.generator.abi import KernelDType
from qnn_custom_ops.runtime.cost import KernelCase
from qnn_custom_ops.runtime.dtype_cases import dtype_cases
from qnn_custom_ops.runtime.hexagon import hexagon_check, libm_calls
from qnn_custom_ops.runtime.host_build import build_host_kernels
from qnn_custom_ops.runtime.kernel_abi import KernelLibrary, KernelTensor

from tests.conftest import doc_block, opdef_xml

DATATYPES = ("FLOAT_32", "UFIXED_POINT_8", "SFIXED_POINT_8", "UFIXED_POINT_16")
DECLARED = "".join(f"<Datatype>QNN_DATATYPE_{d}</Datatype>" for d in DATATYPES)
SWISH_CONFIG = opdef_xml("".join(f"""
    <OpDef>
      <Name>{name}</Name>
      <Input><Name>x</Name><Mandatory>true</Mandatory>{DECLARED}<Shape><Rank>ND</Rank></Shape></Input>
      <Output><Name>output</Name><Mandatory>true</Mandatory>{DECLARED}<Shape><Rank>ND</Rank></Shape></Output>
      <SupportedBackend>HTP</SupportedBackend>
    </OpDef>""" for name in ("Swish", "SwishLibm")), package="SwishPackage")

#: Swish as a user wrote it before qco::map_elementwise and qco/math.h: per element, with libm.
SWISH_LIBM = """template <typename Access>
void swish(qco::TensorView& y, const qco::TensorView& x) {
  const auto in = Access::in(x);
  const auto out = Access::out(y);
  for (int64_t i = 0; i < x.numel(); ++i) out(i, in(i) / (1.0f + std::exp(-in(i))));
}

inline qco::Status SwishLibm(qco::TensorView& output, const qco::TensorView& x) {
  if (!output.same_shape(x)) return qco::Status::kShapeMismatch;
  return qco::with_access({&output, &x}, [&](auto access) { swish<decltype(access)>(output, x); });
}
"""

#: 3000 elements: 23 vectors of 128 codes and a tail of 56.
SHAPES = ["Swish:output=3x1000,x=3x1000", "SwishLibm:output=3x1000,x=3x1000"]


def replace_kernel(package_dir: Path, op: str, code: str) -> None:
    """kernels/<op>.h with ``code`` in place of the generated skeleton's function."""
    kernel = package_dir / f"kernels/{op}.h"
    kernel.write_text(re.sub(rf"inline qco::Status {op}\(.*?\n}}\n", lambda _: code, kernel.read_text(), flags=re.S))


def readme_swish_package(root: Path) -> Path:
    """A package whose Swish kernel is docs/kernels.md's worked elementwise example, in place of the
    generated skeleton (which includes qco/math.h: the example calls qco::sigmoid), beside
    SwishLibm (SWISH_LIBM)."""
    root.mkdir()
    (root / "swish.xml").write_text(SWISH_CONFIG)
    package_dir = generate(qco.load_package(root / "swish.xml"), root).package_dir
    example = doc_block("docs/kernels.md", "A worked elementwise op", "cpp")
    replace_kernel(package_dir, "Swish", example)
    replace_kernel(package_dir, "SwishLibm", SWISH_LIBM)
    return package_dir


def uint8_case(x: np.ndarray, scale: float, offset: int) -> KernelCase:
    """Swish on uint8 codes x, input and output of one encoding."""
    output = KernelTensor(np.zeros_like(x), KernelDType.UFixed8, scale, offset)
    return KernelCase("Swish", f"uint8 {x.size}", (output,), (KernelTensor(x, KernelDType.UFixed8, scale, offset),))


@pytest.mark.slow
def test_the_readme_swish_is_bit_exact_on_hexagon_and_evaluates_its_table_once_per_encoding(tmp_path):
    package_dir = readme_swish_package(tmp_path / "swish")
    package = qco.load_package(package_dir / "config/swish.xml")
    codes = np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)
    again = [uint8_case(codes, 0.05, -128), uint8_case(codes, 0.05, -128), uint8_case(codes, 0.04, -100)]
    results = hexagon_check(package_dir, [*dtype_cases(package, SHAPES), *again])
    swish = [r for r in results if r.op == "Swish"]
    assert all(r.passed for r in swish), "\n".join(map(str, results))
    assert [r.label.split()[0] for r in swish[:len(DATATYPES)]] == list(DATATYPES)
    first, cached, other = swish[len(DATATYPES):]
    assert first.prepare_packets > 10 * first.packets  # the table is made ahead; the call looks up
    # the table is kept for its encoding only
    assert cached.prepare_packets < first.prepare_packets / 10 and other.prepare_packets > first.prepare_packets / 2
    (libm,) = [str(r) for r in results if r.op == "SwishLibm" and not r.passed]  # float32: libm's exp
    line = (package_dir / "kernels/SwishLibm.h").read_text().rsplit("std::exp", 1)[0].count("\n") + 1  # not the comment
    assert "FLOAT_32" in libm and f"kernels/SwishLibm.h:{line} calls std::exp: use qco::exp" in libm, libm


@pytest.mark.slow
def test_the_8_bit_table_gives_the_codes_of_the_float_path_requantized(tmp_path):
    """Every uint8 and int8 code through the table equals swish of the dequantized code in the
    kernel's own float32 branch, requantized as store_real does (half to even, saturated)."""
    package_dir = readme_swish_package(tmp_path / "swish")
    library = KernelLibrary(build_host_kernels(package_dir), "SwishPackage")

    def run(x: np.ndarray, dtype: KernelDType, scale: float, offset: int) -> np.ndarray:
        output = KernelTensor(np.zeros_like(x), dtype, scale, offset)
        library.run("Swish", [output], [KernelTensor(x, dtype, scale, offset)], [])
        return output.array

    for dtype, codes in ((KernelDType.UFixed8, np.arange(256, dtype=np.uint8)),
                         (KernelDType.SFixed8, np.arange(-128, 128, dtype=np.int8))):
        scale, offset = np.float32(0.0625), -3 if dtype is KernelDType.SFixed8 else -140
        real = scale * (codes.astype(np.int32) + offset).astype(np.float32)
        swished = run(real, KernelDType.Float32, 1.0, 0)
        info = np.iinfo(codes.dtype)
        expected = np.clip(np.round(swished * (np.float32(1) / scale)) - np.float32(offset), info.min, info.max)
        assert np.array_equal(run(codes, dtype, float(scale), offset), expected.astype(codes.dtype))


def test_a_kernels_libm_calls_are_named_with_their_replacements_and_comments_and_qco_are_not(tmp_path):
    kernels = tmp_path / "kernels"
    (kernels / "qco").mkdir(parents=True)
    (kernels / "Op.h").write_text('#include "qco/math.h"\n#include "helper.h"\n// std::exp(x) in a comment\n'
                                  "float f(float x) { return qco::exp(x) + vector_exp(x) + std::exp(x); }\n"
                                  "/* powf(x, 2)\n */ float g(float x) { return ::logf (x) * s.exp(x); }\n")
    (kernels / "helper.h").write_text('#include "Op.h"\nfloat h(float x) { return tanhf(x) + sinf(x); }\n')
    (kernels / "qco/math.h").write_text("float e(float x) { return std::exp(x); }\n")
    assert libm_calls(tmp_path, "Op") == [
        "kernels/Op.h:4 calls std::exp: use qco::exp, or qco::sigmoid for 1 / (1 + exp(-x))",
        "kernels/Op.h:6 calls ::logf: use qco::log",
        "kernels/helper.h:2 calls tanhf: use qco::tanh",
        "kernels/helper.h:2 calls sinf: use no qco:: equivalent: a polynomial in + - * / computes the same bits on both",
    ]
