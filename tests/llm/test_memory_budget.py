"""Running costs what the program holds (issue 42, item 4): a program's methods share one copy of
its weights (XNNPACK packs each once, the data file is mapped, not pinned once per method), and
the memory an ``llm`` command may use is the user's to set (``--max-memory``), else what is free."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from qnn_custom_ops.atomic_files import write_atomic
from qnn_custom_ops.cli import main
from qnn_custom_ops.llm_ops import llm_binding
from qnn_custom_ops.llm.memory_budget import (
    FOLDED_PEAK_FACTOR,
    GIB,
    MemoryBudget,
    MemoryBudgetError,
    available_bytes,
    check_run_fits,
    fold_fits,
)
from qnn_custom_ops.lowering.program import lower_methods
from qnn_custom_ops.runtime.weights_store import pages_not_pinned

from tests.llm.exports import export, progress_of

VOCAB, WIDTH, HIDDEN = 16384, 128, 2048
LENGTHS = {"prefill": 8, "decode": 1}


class WideLm(torch.nn.Module):
    """A gathered embedding (a program constant, read from the data file) and two delegated
    projections whose packed weights dominate the program: 8 MiB, 8 MiB and 1 MiB of float32."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.up = torch.nn.Linear(WIDTH, HIDDEN * 8, bias=False)
        self.down = torch.nn.Linear(HIDDEN * 8, 16, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(self.embed(tokens))))


@pytest.fixture(scope="module")
def two_methods(tmp_path_factory) -> tuple[Path, Path, WideLm]:
    """WideLm as ``prefill`` and ``decode`` (one model, two lengths), weights in a data file."""
    model = WideLm().eval()
    methods = {name: (model, (torch.zeros(1, n, dtype=torch.long),)) for name, n in LENGTHS.items()}
    lowered = lower_methods(methods, llm_binding(), external_weights=True)
    directory = tmp_path_factory.mktemp("two-methods")
    pte, ptd = directory / "model.pte", directory / "model.ptd"
    write_atomic(pte, lowered.write_to)
    write_atomic(ptd, lowered.write_data_to)
    return pte, ptd, model


#: Run in a fresh interpreter (the weights cache and the capabilities as a user's process starts
#: with them): loads both methods, prints resident memory after each and the data file's
#: resident bytes, runs each on the tokens given and prints the results.
CHILD = r"""
import json, re, sys
from pathlib import Path
import torch
from qnn_custom_ops.runtime import HostRunner

def anon():
    return int(re.search(r"RssAnon:\s+(\d+)", Path("/proc/self/status").read_text())[1]) * 1024

def data_file_resident(ptd):
    resident, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = line.rstrip().endswith(ptd)
        elif inside and line.startswith("Rss:"):
            resident += int(line.split()[1]) * 1024
    return resident

pte, ptd, tokens = Path(sys.argv[1]).read_bytes(), Path(sys.argv[2]), json.loads(sys.argv[3])
runner = HostRunner()
runner.load(pte, "prefill", ptd)  # the runtime's own allocations first, then the measured loads
report = {"before": anon()}
runner.load(pte, "decode", ptd)
report["after_decode"] = anon()
report["data_file_resident"] = data_file_resident(str(ptd))
report["outputs"] = {
    method: runner.run(pte, [(torch.tensor([ids]),)], method, data=ptd)[0][0].tolist()
    for method, ids in tokens.items()
}
print(json.dumps(report))
"""


@pytest.mark.slow  # lowers a model (7 s) and loads it in a fresh interpreter (7 s)
def test_two_methods_of_a_program_hold_its_weights_once_and_compute_what_the_model_does(two_methods):
    pte, ptd, model = two_methods
    tokens = {name: torch.randint(0, VOCAB, (n,)).tolist() for name, n in LENGTHS.items()}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(pte), str(ptd), json.dumps(tokens)],
        capture_output=True, text=True, env={**os.environ, "QNN_SDK_ROOT": ""}, timeout=120,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    delegated = sum(p.numel() * 4 for name, p in model.named_parameters() if name != "embed.weight")
    # decode's load finds every weight XNNPACK packed for prefill: not another 18 MiB (before: +100%)
    assert report["after_decode"] - report["before"] < delegated / 4, report
    # the embedding is mapped, not pinned: only what a kernel has read is resident (before: all of it, twice)
    assert report["data_file_resident"] < VOCAB * WIDTH * 4 / 4, report
    for method, ids in tokens.items():
        expected = model(torch.tensor([ids])).detach()
        torch.testing.assert_close(torch.tensor(report["outputs"][method]), expected, rtol=1e-4, atol=1e-4)


def test_the_budget_is_what_is_free_unless_the_user_gives_one(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:    6000000 kB\n")
    assert available_bytes(meminfo) == 6000000 * 1024  # not MemTotal
    assert available_bytes(tmp_path / "missing") == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert MemoryBudget.of(7.5) == MemoryBudget(int(7.5 * GIB), given=True)
    assert not MemoryBudget.of(None).given and "MemAvailable" in str(MemoryBudget.of(None))
    assert str(MemoryBudget.of(8)) == "--max-memory 8 GiB"


def test_weights_that_do_not_fit_as_float_are_kept_as_codes_and_it_is_said():
    said: list[str] = []
    weights = GIB  # float32 bytes once folded
    assert fold_fits(weights, MemoryBudget(FOLDED_PEAK_FACTOR * weights, given=True), said.append)
    assert said[-1].startswith("host program: weights dequantized once")
    assert not fold_fits(weights, MemoryBudget(8 * GIB // 2, given=True), said.append)
    assert said[-1] == (
        "host program: weights kept as codes, dequantized on every call (slower, the same results): folding them, "
        "1.00 GiB in float32, would peak near 5x that, past --max-memory 4 GiB"
    )


def _ipc_lock_held() -> bool:
    return bool(int(Path("/proc/thread-self/status").read_text().split("CapEff:")[1].split()[0], 16) >> 14 & 1)


def test_programs_load_without_pinning_pages_and_the_thread_gets_its_capability_back():
    held = _ipc_lock_held()
    with pages_not_pinned():
        assert not _ipc_lock_held()  # the runtime's mlock of each mapped region fails quietly, as a user's
    assert _ipc_lock_held() == held


def test_a_run_that_needs_more_than_the_budget_is_refused_in_one_line(mul3_alone_pte):
    pte = mul3_alone_pte.read_bytes()
    check_run_fits(pte, None, MemoryBudget(2 * GIB, given=True), "export")
    with pytest.raises(MemoryBudgetError) as refused:
        check_run_fits(pte, None, MemoryBudget(GIB // 4, given=True), "out/export")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("out/export: running it takes at least 0.5")
    assert "more than --max-memory 0.25 GiB; give a larger --max-memory" in message


@pytest.mark.parametrize("value", ["abc", "0", "-2", "nan", "inf", ""])
@pytest.mark.parametrize("command", ["export", "generate"])
def test_a_bad_max_memory_is_one_line_naming_the_flag(tmp_path, capsys, command, value):
    positional = ["CHECKPOINT", "-o", str(tmp_path / "out")]
    if command == "generate":
        positional = [str(tmp_path), "--prompt", "x"]
    with pytest.raises(SystemExit) as exited:
        main(["llm", command, *positional, "--max-memory", value])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error == (
        f"error: qnn-custom-ops llm {command}: argument --max-memory: {value!r} is not a number of GiB above 0 "
        f"(e.g. 8 or 7.5); see qnn-custom-ops llm {command} --help\n"
    )


@pytest.mark.slow  # a 16a8w export of the tiny checkpoint (calibration and lowering)
def test_a_budget_too_small_for_float_weights_keeps_codes_says_so_and_generate_runs_within_one(
        checkpoint, capsys):  # noqa: F811
    out = export(checkpoint, "llm-export-16a8w-budget", "--quant", "16a8w", "--max-memory", "0.0001")
    said = [line for line in progress_of(out) if line.startswith("host program: ")]
    assert len(said) == 1 and said[0].startswith("host program: weights kept as codes, dequantized on every call")
    assert said[0].endswith("past --max-memory 0.0001 GiB"), said
    assert main(["llm", "generate", str(out), "--prompt", "The host", "--max-new-tokens", "4", "--ids",
                 "--max-memory", "2"]) == 0
    assert "ids: " in capsys.readouterr().out
    assert main(["llm", "generate", str(out), "--prompt", "The host", "--max-memory", "0.1"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and re.match(
        rf"error: {out}: running it takes at least 0\.5\d* GiB .* more than --max-memory 0\.1 GiB; give a larger", error
    ), error
