"""Host kernel library: a cold build, then the rebuild with nothing changed (target: well under 1 s).

    .venv/bin/python -m benchmarks.bench_host_library
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QNN_SDK_ROOT", "")  # never let executorch download the SDK

import qnn_custom_ops as qco  # noqa: E402

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "op_packages" / "ExampleOpPackage"


def timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def main() -> None:
    package = qco.load_package(PACKAGE_DIR / "config" / "ExampleOpPackage.xml")
    mul3 = qco.define_torch_ops(package, "bench_ops", {"ExampleCustomOp": lambda x: x * 3},
                                names={"ExampleCustomOp": "mul3"})
    binding = qco.bind(package, mul3)
    with tempfile.TemporaryDirectory() as tmp:
        def build() -> Path:
            return qco.build_host_library(PACKAGE_DIR, binding, build_root=Path(tmp))

        cold, library = timed(build)
        warm = min(timed(build)[0] for _ in range(5))
    print(f"cold build            {cold * 1000:9.1f} ms  ({library.name})")
    print(f"rebuild, unchanged    {warm * 1000:9.1f} ms  {warm / 1.0:.3f}x of the 1 s target; "
          f"{cold / warm:.0f}x faster than the cold build")


if __name__ == "__main__":
    main()
