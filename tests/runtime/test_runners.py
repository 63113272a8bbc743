"""The x86 and device runners against test doubles of what cannot exist here: the QNN SDK's
libraries, ``qnn_executor_runner`` (tests/doubles/qnn_executor_runner) and ``adb`` with a
phone (tests/doubles/adb). The real adb and runner are what users run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import qnn_custom_ops as qco
from qnn_custom_ops.lowering import op_package_options
from qnn_custom_ops.lowering import DEVICE_WORKSPACE, OpPackageBuild, device_libraries, device_library_path
from qnn_custom_ops.runtime import DeviceRunner, RawOutputError, RunnerError, X86Runner

from tests.conftest import DOUBLES
from tests.torch_ops import EXAMPLE_PACKAGE, MUL3

SERIAL = "R5CT00TEST"
SHAPE = (1, 2, 2, 4)


@pytest.fixture(scope="module")
def mul3_pte(mul3_alone_pte):
    """A real program (mul3 alone on SHAPE); the runner double computes the same thing."""
    return mul3_alone_pte.read_bytes()


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF double")
    return path


@pytest.fixture
def fake_sdk(tmp_path, monkeypatch):
    """Test double of a QNN SDK tree: the library files the runners look for, empty."""
    sdk = tmp_path / "qnn_sdk"
    for relative in ("lib/x86_64-linux-clang/libQnnHtp.so", "lib/aarch64-android/libQnnHtp.so",
                     "lib/aarch64-android/libQnnHtpV75Stub.so", "lib/aarch64-android/libQnnHtpPrepare.so",
                     "lib/aarch64-android/libQnnSystem.so", "lib/hexagon-v75/unsigned/libQnnHtpV75Skel.so"):
        touch(sdk / relative)
    monkeypatch.setenv("QNN_SDK_ROOT", str(sdk))
    return sdk


@pytest.fixture
def build_folder(tmp_path):
    """Test double of an ExecuTorch build with the QNN backend: the runner double and a backend file."""
    build = tmp_path / "executorch_build"
    runner = build / "examples/qualcomm/executor_runner/qnn_executor_runner"
    runner.parent.mkdir(parents=True)
    shutil.copy2(DOUBLES / "qnn_executor_runner", runner)
    touch(build / "backends/qualcomm/libqnn_executorch_backend.so")
    return build


@pytest.fixture
def device(tmp_path, monkeypatch):
    """The adb double on PATH, a device filesystem and the call log."""
    root, log = tmp_path / "device_fs", tmp_path / "adb_calls.jsonl"
    root.mkdir()
    monkeypatch.setenv("PATH", os.pathsep.join([str(DOUBLES), str(Path(sys.executable).parent),
                                                os.environ["PATH"]]))
    monkeypatch.setenv("FAKE_ADB_ROOT", str(root))
    monkeypatch.setenv("FAKE_ADB_LOG", str(log))
    monkeypatch.setenv("FAKE_ADB_SERIALS", SERIAL)
    return root, log


@pytest.fixture
def op_package_builds(tmp_path):
    return [OpPackageBuild("HTP", "aarch64-android", touch(tmp_path / "out/hexagon-v75/libQnnExampleOpPackage.so")),
            OpPackageBuild("CPU", "aarch64-android", touch(tmp_path / "out/aarch64-android/libQnnExampleOpPackage.so"))]


def device_runner(build_folder, op_package_builds, adb_host=None) -> DeviceRunner:
    return DeviceRunner(SERIAL, "SM8650", build_folder, device_libraries("ExampleOpPackage", op_package_builds),
                        adb_host=adb_host)


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.slow
def test_device_run_pushes_to_the_compile_spec_paths_runs_and_pulls(mul3_pte, fake_sdk, build_folder, device,
                                                                    op_package_builds, monkeypatch):
    root, log = device
    htp_path = device_library_path("ExampleOpPackage", "HTP")
    cpu_path = device_library_path("ExampleOpPackage", "CPU")
    # the runner double refuses to run unless the op package libraries are where the .pte says
    monkeypatch.setenv("FAKE_RUNNER_REQUIRES", f"{root}{htp_path},{root}{cpu_path}")
    x = torch.randn(*SHAPE)
    (outputs,) = device_runner(build_folder, op_package_builds, adb_host="10.0.0.2").run(mul3_pte, [(x,)])
    assert torch.equal(outputs[0], x * 3)

    sequence = calls(log)
    assert all(call[:4] == ["-H", "10.0.0.2", "-s", SERIAL] for call in sequence)
    commands = [call[4:] for call in sequence]
    ws = DEVICE_WORKSPACE
    assert commands[0] == ["get-state"]
    assert commands[1] == ["shell", f"rm -rf {ws} && mkdir -p {ws}/inputs"]
    pushes = [c[2] for c in commands if c[0] == "push"]
    assert pushes == [f"{ws}/model.pte", f"{ws}/qnn_executor_runner", f"{ws}/libqnn_executorch_backend.so",
                      f"{ws}/libQnnHtp.so", f"{ws}/libQnnHtpV75Stub.so", f"{ws}/libQnnHtpPrepare.so",
                      f"{ws}/libQnnSystem.so", f"{ws}/libQnnHtpV75Skel.so", htp_path, cpu_path,
                      f"{ws}/inputs/input_0_0.raw", f"{ws}/input_list.txt"]
    run = commands[-2]
    assert run[0] == "shell" and run[1].startswith(f"cd {ws} && chmod +x qnn_executor_runner && "
                                                   "LD_LIBRARY_PATH=. ADSP_LIBRARY_PATH=. ./qnn_executor_runner "
                                                   "--model_path model.pte --input_list_path input_list.txt")
    assert commands[-1][:2] == ["pull", f"{ws}/outputs"]
    # what the compile spec baked in is exactly where the libraries were pushed
    binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})
    baked = {i.op_package_path for i in op_package_options(binding, op_package_builds).op_package_infos}
    assert baked == {htp_path, cpu_path} and baked <= set(pushes)


@pytest.mark.slow
def test_no_device(mul3_pte, fake_sdk, build_folder, device, op_package_builds, monkeypatch):
    monkeypatch.setenv("FAKE_ADB_SERIALS", "someone-else")
    with pytest.raises(RunnerError, match=f"no device {SERIAL}.*check `adb devices`"):
        device_runner(build_folder, op_package_builds).run(mul3_pte, [(torch.randn(*SHAPE),)])


@pytest.mark.slow
def test_push_failure(mul3_pte, fake_sdk, build_folder, device, op_package_builds, monkeypatch):
    monkeypatch.setenv("FAKE_ADB_FAIL", "push")
    with pytest.raises(RunnerError, match=f"pushing model.pte failed on {SERIAL} .*Read-only file system"):
        device_runner(build_folder, op_package_builds).run(mul3_pte, [(torch.randn(*SHAPE),)])


@pytest.mark.slow
def test_runner_exit_status(mul3_pte, fake_sdk, build_folder, device, op_package_builds, monkeypatch):
    monkeypatch.setenv("FAKE_RUNNER_MODE", "fail")
    with pytest.raises(RunnerError, match=r"qnn_executor_runner exited with status 1 .*graph execute failed"):
        device_runner(build_folder, op_package_builds).run(mul3_pte, [(torch.randn(*SHAPE),)])


@pytest.mark.parametrize("mode, message", [("missing", r"output_0_0.raw: missing"),
                                           ("short", r"output_0_0.raw: 60 bytes, expected 64")])
@pytest.mark.slow
def test_missing_or_wrong_sized_output(mul3_pte, fake_sdk, build_folder, device, op_package_builds, monkeypatch,
                                       mode, message):
    monkeypatch.setenv("FAKE_RUNNER_MODE", mode)
    with pytest.raises(RawOutputError, match=message):
        device_runner(build_folder, op_package_builds).run(mul3_pte, [(torch.randn(*SHAPE),)])


def test_missing_local_files_are_named_before_pushing(mul3_pte, fake_sdk, build_folder, device, op_package_builds):
    (fake_sdk / "lib/hexagon-v75/unsigned/libQnnHtpV75Skel.so").unlink()
    with pytest.raises(RunnerError, match="files to push are missing: .*libQnnHtpV75Skel.so"):
        device_runner(build_folder, op_package_builds).run(mul3_pte, [(torch.randn(*SHAPE),)])


@pytest.mark.slow
def test_device_target_without_the_sdk(mul3_pte, build_folder, device, op_package_builds, monkeypatch):
    monkeypatch.setenv("QNN_SDK_ROOT", "")
    with pytest.raises(qco.QnnSdkMissingError, match="the device target needs the QNN SDK"):
        device_runner(build_folder, op_package_builds).run(mul3_pte, [(torch.randn(*SHAPE),)])


@pytest.mark.slow
def test_x86_runner_speaks_the_raw_protocol(mul3_pte, fake_sdk, build_folder, monkeypatch):
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    inferences = [(torch.randn(*SHAPE),), (torch.randn(*SHAPE),)]
    outputs = X86Runner(build_folder).run(mul3_pte, inferences)
    assert [torch.equal(out[0], inp[0] * 3) for out, inp in zip(outputs, inferences)] == [True, True]


@pytest.mark.slow
def test_cli_run_on_the_host(mul3_pte, tmp_path, monkeypatch, capsys):
    """The real entry point once, in a fresh process; the other outcomes of the same command
    in-process (each subprocess re-imports torch and executorch)."""
    from qnn_custom_ops import cli
    from qnn_custom_ops.runtime import build_host_library

    from tests.conftest import OP_PACKAGES

    library = build_host_library(OP_PACKAGES / "ExampleOpPackage", qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3}))
    pte = tmp_path / "mul3.pte"
    pte.write_bytes(mul3_pte)
    x = torch.randn(*SHAPE, generator=torch.Generator().manual_seed(0))
    torch.save(x, tmp_path / "x.pt")
    torch.save(x * 3, tmp_path / "good.pt")
    (tmp_path / "bad.raw").write_bytes((x * 3 + 0.5).numpy().tobytes())
    run = ["run", str(pte), "--inputs", str(tmp_path / "x.pt")]

    good = subprocess.run([str(Path(sys.executable).parent / "qnn-custom-ops"), *run, "--library", str(library),
                           "--golden", str(tmp_path / "good.pt")], capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
    assert good.stdout.strip().startswith("output 0: [1, 2, 2, 4] float32  max abs 0  mean abs 0  cosine 1.000000")
    assert "Traceback" not in good.stderr

    assert cli.main(run + ["--library", str(library), "--golden", str(tmp_path / "bad.raw")]) == 3
    out = capsys.readouterr().out
    assert "max abs 0.5" in out and out.strip().endswith("FAIL")

    # an op of its own namespace: no library of any test registers its kernel
    unbuilt = qco.define_torch_ops(EXAMPLE_PACKAGE, "qco_cli_unbuilt", {"ExampleCustomOp": lambda x: x * 3})

    class Unbuilt(torch.nn.Module):
        def forward(self, x):
            return unbuilt["ExampleCustomOp"](x)

    (tmp_path / "unbuilt.pte").write_bytes(qco.lower(Unbuilt(), (x,), qco.bind(EXAMPLE_PACKAGE, unbuilt)).buffer)
    assert cli.main(["run", str(tmp_path / "unbuilt.pte"), "--inputs", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    said = err.strip().splitlines()[-1]
    assert said.startswith("error: program needs kernels that are not registered (qco_cli_unbuilt::"
                           "example_custom_op.out: its op package's host library") and "load_program_libraries" in said
    monkeypatch.setenv("QNN_SDK_ROOT", "")
    assert cli.main(run + ["--target", "x86", "--build-folder", str(tmp_path)]) == 2
    err += capsys.readouterr().err
    assert "the x86 target needs the QNN SDK" in err and "Traceback" not in err


def _corruptions(pte: bytes) -> dict[str, bytes]:
    """Random files (their identifier bytes are not UTF-8: the runtime's log of them aborted
    the interpreter), a real program with bytes flipped, and one cut short."""
    generator = torch.Generator().manual_seed(7)
    random = {f"random{i}": bytes([0, 0, 0, 0, 0xFC + i % 3, 0xAB, 0x80, 0xFF])
              + bytes(torch.randint(0, 256, (1000 * (i + 1),), generator=generator, dtype=torch.uint8).tolist())
              for i in range(4)}
    flipped = bytearray(pte)
    for index in torch.randint(16, len(pte), (40,), generator=generator).tolist():
        flipped[index] ^= 0x5A
    return {**random, "flipped": bytes(flipped), "truncated": pte[: len(pte) // 3], "empty": b""}


@pytest.mark.slow
def test_run_on_a_corrupt_program_is_one_line_and_exit_2(mul3_pte, tmp_path, capsys):
    from qnn_custom_ops.cli import main

    for name, data in _corruptions(mul3_pte).items():
        (tmp_path / f"{name}.pte").write_bytes(data)
        assert main(["run", str(tmp_path / f"{name}.pte"), "--inputs", os.devnull]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {tmp_path / name}.pte: not an ExecuTorch program"), err
    with pytest.raises(qco.runtime.ProgramError, match="not an ExecuTorch program"):
        qco.runtime.HostRunner().run((tmp_path / "random0.pte").read_bytes(), [()])
    # in a process of its own, as a user runs it: the interpreter is not aborted
    result = subprocess.run([sys.executable, "-m", "qnn_custom_ops", "run", str(tmp_path / "random1.pte"),
                             "--inputs", os.devnull], capture_output=True, text=True,
                            env={**os.environ, "QNN_SDK_ROOT": ""})
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith("error: "), result.stderr


#: Bits of mul3_alone's program whose flip the runtime, or its loader's Python, once let through as an
#: internal error (MemoryError, UnicodeDecodeError, KeyError, IndexError, "Failed to load method")
#: with its log lines leaked, or an op name holding a newline; and a few that leave it runnable.
#: Bit 1380 turns the count of planned buffers into garbage sizes.
FLIPPED_BITS = (100, 500, 1380, 1702, 1863, 2369, 2530, 2599, 2852, 3174, 3404, 3496, 3680, 3887, 4002, 5000)


@pytest.mark.slow
def test_run_on_a_program_with_a_flipped_bit_is_one_line_and_exit_2_or_runs(mul3_pte, tmp_path, capsys):
    """Each flip in a child process of its own: an abort would be its death, not the test's."""
    from qnn_custom_ops.runtime import build_host_library

    from tests.conftest import OP_PACKAGES

    library = build_host_library(OP_PACKAGES / "ExampleOpPackage", qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3}))
    torch.save(torch.randn(*SHAPE), tmp_path / "x.pt")
    script = ("import sys\nfrom qnn_custom_ops.cli import main\nfor pte in sys.argv[3:]:\n"
              "    print(pte, main(['run', pte, '--inputs', sys.argv[1], '--library', sys.argv[2]]), file=sys.stderr)")
    programs = []
    for bit in FLIPPED_BITS:
        flipped = bytearray(mul3_pte)
        flipped[bit // 8] ^= 1 << bit % 8
        (tmp_path / f"{bit}.pte").write_bytes(flipped)
        programs.append(str(tmp_path / f"{bit}.pte"))
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "x.pt"), str(library), *programs],
                            capture_output=True, text=True, env={**os.environ, "QNN_SDK_ROOT": ""})
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    outcomes, errors = {}, []  # each program's exit status, after what it printed
    for line in lines:
        if line.startswith(str(tmp_path)) and line.split()[-1] in ("0", "2"):
            outcomes[line.split()[0]], errors = (int(line.split()[-1]), errors), []
        else:
            errors.append(line)
    assert sorted(outcomes) == sorted(programs), lines
    for pte, (code, said) in outcomes.items():
        assert said == [] if code == 0 else (len(said) == 1 and said[0].startswith("error: ")), (pte, said)
    # garbage buffer sizes are refused before the runtime allocates them (it touched 17 GB for 35 s)
    assert "GiB of buffers, more than this machine's" in outcomes[str(tmp_path / "1380.pte")][1][0]


def test_a_program_delegated_to_a_backend_the_host_lacks_is_one_line(mul3_pte, tmp_path, capsys):
    """A QNN program run with --target host: the backend and the targets that run it."""
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary
    from executorch.exir.schema import BackendDelegate, BackendDelegateDataReference, DataLocation

    from qnn_custom_ops.cli import main

    pte_file = deserialize_pte_binary(mul3_pte)
    pte_file.program.execution_plan[0].delegates.append(
        BackendDelegate("QnnBackend", BackendDelegateDataReference(DataLocation.INLINE, 0), []))
    (tmp_path / "qnn.pte").write_bytes(bytes(serialize_pte_binary(pte_file)))
    torch.save(torch.randn(*SHAPE), tmp_path / "x.pt")
    assert main(["run", str(tmp_path / "qnn.pte"), "--inputs", str(tmp_path / "x.pt")]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: program: delegated to QnnBackend, which the host target does not run: run it with --target x86 "
        "(the QNN HTP simulator) or --target device")
