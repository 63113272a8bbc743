"""A full disk: exit 2 naming the path and the errno, and nothing half-written.

The full disk is real: a small tmpfs mounted in a mount namespace of the test's own
(``unshare``), so nothing outside the test process tree sees it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qnn_custom_ops.cli import main

from tests.conftest import OP_PACKAGES

CONFIG = OP_PACKAGES / "LlmOpPackage/config/LlmOpPackage.xml"


def _in_a_small_tmpfs(out: Path, size: str, command: list[str]) -> subprocess.CompletedProcess:
    """Run ``command`` with ``out`` a tmpfs of ``size``; prints its exit status, then what it left."""
    script = (f'mount -t tmpfs -o size={size} tmpfs "$0" || exit 99; "$@"; echo "exit $?"; '
              'find "$0" -mindepth 1 | sort')
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, str(out), *command], capture_output=True,
                          text=True, env={**os.environ, "QNN_SDK_ROOT": ""})


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
@pytest.mark.parametrize("size", ["16k", "64k"])  # full at the first file, and part-way through
def test_generate_onto_a_full_disk_is_exit_2_and_writes_nothing(tmp_path, size):
    out = tmp_path / "out"
    out.mkdir()
    result = _in_a_small_tmpfs(out, size, [sys.executable, "-m", "qnn_custom_ops", "generate", str(CONFIG),
                                           "-o", str(out)])
    assert "exit 99" not in result.stdout, f"tmpfs mount refused: {result.stderr}"
    lines = result.stdout.splitlines()
    assert lines[-1] == "exit 2", result.stdout + result.stderr
    (error,) = result.stderr.strip().splitlines()
    assert error.startswith(f"error: {out}/LlmOpPackage/") and "No space left on device (ENOSPC); nothing was " \
                                                               "written" in error, error
    assert lines[:-1] == [], f"left behind: {lines[:-1]}"


def test_a_program_written_to_a_full_device_is_one_line(capsys, tmp_path):
    """/dev/full refuses every write with ENOSPC: the same error, through write_atomic."""
    module = tmp_path / "full_disk_ops.py"
    module.write_text("import torch\n"
                      "torch.library.define('qco_full_disk::twice', '(Tensor x) -> Tensor')\n"
                      "torch.library.impl('qco_full_disk::twice', 'CompositeExplicitAutograd')(lambda x: x * 2)\n")
    sys.path.insert(0, str(tmp_path))
    try:
        code = main(["opdef-from-torch", "full_disk_ops:qco_full_disk.twice.default", "--package", "P",
                     "-o", "/dev/full"])
    finally:
        sys.path.remove(str(tmp_path))
    assert code == 2
    assert capsys.readouterr().err.strip() == ("error: /dev/full: cannot be written: No space left on device (ENOSPC); "
                                               "nothing was written (free some space, or choose another output)")
