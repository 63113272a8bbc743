"""Generation speed: a 200-op package, from a cold interpreter, then regenerated unchanged.

Targets (issue 2): generate under 2 s with interpreter start; regenerate unchanged under
0.5 s. Prints each time beside a bare interpreter start measured in the same run, and the
ratio to its target.

    .venv/bin/python -m benchmarks.bench_generate [--ops 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def op_xml(index: int) -> str:
    return f"""
    <OpDef>
      <Name>Op{index}</Name>
      <Description><Content>Benchmark op {index}.</Content></Description>
      <Input><Name>x</Name><Mandatory>true</Mandatory><Datatype>QNN_DATATYPE_FLOAT_32</Datatype>
        <Datatype>QNN_DATATYPE_UFIXED_POINT_8</Datatype><Shape><Rank>4D</Rank><Layout>NHWC</Layout></Shape></Input>
      <Input><Name>w</Name><Mandatory>false</Mandatory><Datatype>QNN_DATATYPE_UFIXED_POINT_8</Datatype>
        <Shape><Rank>1D</Rank></Shape><IsStaticTensor>true</IsStaticTensor></Input>
      <Output><Name>y</Name><Mandatory>true</Mandatory><Datatype>QNN_DATATYPE_FLOAT_32</Datatype>
        <Datatype>QNN_DATATYPE_UFIXED_POINT_8</Datatype><Shape><Rank>4D</Rank></Shape></Output>
      <Parameter><Name>axis</Name><Mandatory>false</Mandatory><Datatype>QNN_DATATYPE_INT_32</Datatype>
        <Shape><Rank>SCALAR</Rank></Shape><Default>-1</Default></Parameter>
      <Parameter><Name>mode</Name><Mandatory>false</Mandatory><Datatype>QNN_DATATYPE_UINT_32</Datatype>
        <Shape><Rank>SCALAR</Rank></Shape><Default>1</Default>
        <Enumeration><Enum>a</Enum><Enum>b</Enum></Enumeration></Parameter>
      <SupportedBackend>HTP</SupportedBackend>
    </OpDef>"""


def write_config(path: Path, ops: int) -> None:
    body = "".join(op_xml(i) for i in range(ops))
    path.write_text(f'<?xml version="1.0"?>\n<OpDefCollection PackageName="BenchPackage" Domain="b" '
                    f'Version="1.0"><OpDefList>{body}</OpDefList></OpDefCollection>\n')


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config, out = Path(tmp) / "bench.xml", Path(tmp) / "out"
        write_config(config, args.ops)
        generate = [str(BIN / "generate-op-package"), str(config), "-o", str(out)]
        bare, fresh, unchanged = [], [], []
        for _ in range(args.repeat):
            bare.append(timed([sys.executable, "-c", "pass"]))
            shutil.rmtree(out, ignore_errors=True)
            fresh.append(timed(generate))
            unchanged.append(timed(generate))
        files = sum(1 for p in out.rglob("*") if p.is_file())
    rows = [
        ("interpreter start (python -c pass)", statistics.median(bare), None),
        (f"generate {args.ops} ops, {files} files (cold CLI)", statistics.median(fresh), 2.0),
        ("regenerate unchanged (cold CLI)", statistics.median(unchanged), 0.5),
    ]
    print(f"median of {args.repeat} runs")
    for label, seconds, target in rows:
        versus = f"{seconds / target:5.2f}x of the {target:.1f} s target" if target else ""
        print(f"  {label:45} {seconds * 1000:8.1f} ms  {versus}")
    print(f"  regenerate / generate: {rows[2][1] / rows[1][1]:.2f}; "
          f"generate / interpreter start: {rows[1][1] / rows[0][1]:.1f}")


if __name__ == "__main__":
    main()
