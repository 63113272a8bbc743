"""A wheel built from the tree works on its own: installed apart from the checkout, the LLM op
library finds its op package inside the wheel, builds its host library and runs rms_norm, and the
generator writes a package with every shared kernel header it ships."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = """
import sys, torch
import qnn_custom_ops as qco
from qnn_custom_ops.llm_ops import llm_binding, llm_ops, package_dir
from qnn_custom_ops.runtime import HostRunner

assert str(package_dir()).startswith(sys.argv[1]), package_dir()  # the wheel's copy, not the checkout's
library = qco.build_host_library(package_dir(), llm_binding())
rms_norm = llm_ops()["rms_norm"]

class Norm(torch.nn.Module):
    def forward(self, x, weight):
        return rms_norm(x, weight, 1e-6)

x, weight = torch.randn(3, 40), torch.randn(40)
program = qco.lower(Norm(), (x, weight), llm_binding())
(out,) = HostRunner([library]).run(program.buffer, [(x, weight)])[0]
expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
assert torch.allclose(out, expected, atol=1e-5), (out - expected).abs().max()
print("rms_norm ok")

from qnn_custom_ops.generator import generate

generated = generate(qco.load_package(package_dir() / "config" / "LlmOpPackage.xml"), sys.argv[2]).package_dir
for header in ("tensor_view", "access", "math", "hvx", "prepare"):
    copy = (generated / "kernels" / "qco" / f"{header}.h").read_bytes()
    assert copy == (package_dir() / "kernels" / "qco" / f"{header}.h").read_bytes(), header
print("generated ok")
"""


@pytest.mark.slow
def test_a_wheel_installed_apart_from_the_checkout_builds_and_runs_the_llm_ops(tmp_path):
    wheel_dir, target = tmp_path / "wheel", tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheel_dir), str(REPO)], check=True, capture_output=True)
    (wheel,) = wheel_dir.glob("qnn_custom_ops-*.whl")
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if "/op_packages/" in name}
    assert "qnn_custom_ops/op_packages/LlmOpPackage/kernels/RmsNorm.h" in shipped
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    # -S: no site-packages .pth files, so the checkout's editable install cannot shadow the wheel;
    # the dependencies come from this environment's site-packages, after the wheel
    site_packages = sysconfig.get_paths()["purelib"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), site_packages]), "QNN_SDK_ROOT": ""}
    result = subprocess.run([sys.executable, "-S", "-c", SCRIPT, str(target), str(tmp_path / "generated")],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.splitlines()[-2:] == ["rms_norm ok", "generated ok"], (
        result.stderr[-3000:])
    assert not Path(target / "qnn_custom_ops/op_packages").is_symlink()
