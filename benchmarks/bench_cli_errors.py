"""How fast a mistake is answered: each ``llm`` command given a typo'd path or a wrong option,
from a cold interpreter (``qnn-custom-ops`` as a user runs it), and ``llm families``.

Target (issue 44): one line, exit 2, in under 2 s, because the arguments are checked before
torch, executorch and transformers are imported (7.6-8.0 s here before, 11.7-12.5 s on the
issue's machine). Prints each case's median and slowest time beside a bare interpreter start
measured in the same run.

    .venv/bin/python -m benchmarks.bench_cli_errors [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
TARGET_SECONDS = 2.0


def cases(root: Path) -> list[tuple[str, list[str], int]]:
    """(what, argv, expected exit status): every one a mistake but the listing."""
    export = root / "export"  # a directory with a manifest: the option is what is wrong
    export.mkdir()
    (export / "manifest.json").write_text("{}")
    text = root / "text.txt"
    text.write_text("some text\n")
    nothing, out = str(root / "nothing"), str(root / "out")
    return [
        ("export: no such checkpoint", ["llm", "export", nothing, "-o", out], 2),
        ("export: --quant typo", ["llm", "export", nothing, "-o", out, "--quant", "16a8", "--ctx", "64"], 2),
        ("export: --decoder-model-version typo", ["llm", "export", nothing, "-o", out, "--decoder-model-version",
                                                  "qwen"], 2),
        ("export: --prefill 0", ["llm", "export", nothing, "-o", out, "--prefill", "0"], 2),
        ("export: no such --calibration", ["llm", "export", nothing, "-o", out, "--calibration", "nope.txt"], 2),
        ("generate: no such export", ["llm", "generate", nothing, "--prompt", "hi"], 2),
        ("generate: --top-p out of range", ["llm", "generate", str(export), "--prompt", "hi", "--temperature", "1",
                                            "--top-p", "2"], 2),
        ("eval: no such export", ["llm", "eval", nothing, "--text", str(text)], 2),
        ("eval: no such --text", ["llm", "eval", str(export), "--text", "nope.txt"], 2),
        ("eval: --against neither", ["llm", "eval", str(export), "--text", str(text), "--against", str(root)], 2),
        ("families", ["llm", "families"], 0),
    ]


def timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True)
    return time.monotonic() - started, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    bare = statistics.median(timed([sys.executable, "-c", "pass"])[0] for _ in range(args.repeat))
    print(f"bare interpreter start: {bare:.2f} s (median of {args.repeat})")
    print(f"{'case':<40}{'median':>8}{'slowest':>9}  first line said")
    slowest_overall = 0.0
    with tempfile.TemporaryDirectory(prefix="qco-bench-errors-") as scratch:
        for what, argv, status in cases(Path(scratch)):
            times, said = [], ""
            for _ in range(args.repeat):
                seconds, done = timed([str(BIN / "qnn-custom-ops"), *argv])
                lines = (done.stderr if status else done.stdout).strip().splitlines()
                if done.returncode != status or (status and len(lines) != 1):
                    sys.exit(f"{what}: exit {done.returncode} (expected {status}), stderr: {done.stderr.strip()!r}")
                times.append(seconds)
                said = lines[0]
            slowest_overall = max(slowest_overall, max(times))
            print(f"{what:<40}{statistics.median(times):>7.2f}s{max(times):>8.2f}s  {said[:90]}")
    verdict = "within" if slowest_overall < TARGET_SECONDS else "OVER"
    print(f"slowest of all: {slowest_overall:.2f} s, {verdict} the {TARGET_SECONDS:.0f} s target")


if __name__ == "__main__":
    main()
