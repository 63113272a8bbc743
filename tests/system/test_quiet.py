"""qco.quieted(): a script opts out of third-party noise for a block, keeps our warnings and
its own, and finds logging and warnings as they were after the block."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import DATA, OP_PACKAGES

# A user's script: the quantized flow on the ExampleOpPackage, run once, with or without the block.
SCRIPT = f"""
import logging, sys, warnings
import qnn_custom_ops as qco


def flow():
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from qnn_custom_ops.runtime import HostRunner

    qco.load_package({str(DATA / "every_feature.xml")!r})  # OpDefWarnings: ours, always shown
    warnings.warn("the script's own warning")
    package = qco.load_package({str(OP_PACKAGES / "ExampleOpPackage/config/ExampleOpPackage.xml")!r})
    mul3 = qco.define_torch_ops(package, "my_ops", {{"ExampleCustomOp": lambda x: x * 3}},
                                names={{"ExampleCustomOp": "mul3"}})["ExampleCustomOp"]
    binding = qco.bind(package, {{"ExampleCustomOp": mul3}})

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(mul3(x), dim=-1)

    model = Model()
    inputs = (torch.randn(1, 3, 8, 8),)
    prepared = prepare_pt2e(torch.export.export(model, inputs).module(), qco.make_quantizer(binding, "8a8w"))
    prepared(*inputs)
    program = qco.lower(convert_pt2e(prepared), inputs, binding, target="host")
    HostRunner([qco.build_host_library({str(OP_PACKAGES / "ExampleOpPackage")!r}, binding)]).run(program.buffer, [inputs])


state = (logging.root.manager.disable, warnings.showwarning)
if sys.argv[1] == "quieted":
    with qco.quieted():
        flow()
else:
    flow()
print("restored" if (logging.root.manager.disable, warnings.showwarning) == state else "changed")
print(len(warnings.filters), "warning filters")  # the ones the imports installed are kept
warnings.warn("after the block", FutureWarning)
"""

# What torchao, torch, executorch and the ExecuTorch runtime print while the flow runs.
THIRD_PARTY = re.compile(r"torchao|_pytree\.py|^\[(INFO|WARNING) |LeafSpec|^\[cpuinfo_utils")


def run_flow(tmp_path, mode: str) -> tuple[list[str], list[str]]:
    """The script's stdout and stderr lines, run with ``mode`` "plain" or "quieted"."""
    script = tmp_path / "flow.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines(), result.stderr.splitlines()


@pytest.mark.slow
def test_quieted_drops_third_party_noise_keeps_our_warnings_and_restores_logging_and_warnings(tmp_path):
    (plain_out, loud), (quiet_out, quiet) = run_flow(tmp_path, "plain"), run_flow(tmp_path, "quieted")
    assert quiet_out == plain_out and plain_out[0] == "restored"
    noise = [line for line in loud if THIRD_PARTY.search(line)]
    assert len({THIRD_PARTY.search(line)[0] for line in noise}) >= 4, noise  # torchao, torch, executorch's kinds
    assert [line for line in quiet if THIRD_PARTY.search(line)] == []
    ours = [line for line in loud if re.search(r"OpDefWarning|the script's own warning|after the block", line)]
    assert len(ours) >= 4 and [line for line in quiet if line in ours] == ours


def test_the_qnn_backends_start_up_line_is_dropped_from_a_childs_stdout_and_kept_with_verbose():
    from qnn_custom_ops.quiet import native_stdout_filtered

    said = (" # LIBNATIVE: No alternate configuration present in libnative_tls.conf or from LIBNATIVE_CONFIG "
            "environment variable - using default thread-local behavior.\nout: qwen3, 16a8w\nhere: llm generate out\n")
    assert native_stdout_filtered(said) == "out: qwen3, 16a8w\nhere: llm generate out\n"
    assert native_stdout_filtered(said, verbose=True) == said


LIVE = """
import os, sys
from pathlib import Path
from qnn_custom_ops.quiet import native_noise_filtered

written = Path(sys.argv[1])
with native_noise_filtered():
    print("[   1.0s] read layer 1 of 2", file=sys.stderr)
    os.write(2, b"[INFO] [Qnn ExecuTorch] backend set up\\n")
    os.write(2, b"a native line of its own\\n")
    text = written.read_text()
    print("progress shown while running:", "read layer 1 of 2" in text, "; native held:", "of its own" not in text)
"""


def test_progress_inside_the_native_filter_is_shown_as_it_is_written_and_native_noise_is_still_dropped(tmp_path):
    """A long ``llm export --progress`` says how far it is while it runs: Python's lines pass the
    filter that holds the runtime's C++ lines (which are replayed after it, known noise dropped)."""
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as sink:
        out = subprocess.run([sys.executable, "-c", LIVE, str(stderr)], stderr=sink, stdout=subprocess.PIPE,
                             text=True, check=True).stdout
    assert out.strip() == "progress shown while running: True ; native held: True"
    assert stderr.read_text().splitlines() == ["[   1.0s] read layer 1 of 2", "a native line of its own"]
