"""The command line as a user runs it: exit codes, one line per problem, no traceback."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qnn_custom_ops import cli
from qnn_custom_ops.cli.process import run_handler

import qnn_custom_ops as qco

from tests.conftest import DATA, FIXTURES, REPO, opdef_xml, simple_op

BIN = Path(sys.executable).parent


def run(tool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *map(str, args)], capture_output=True, text=True, cwd=cwd)


@pytest.mark.slow
def test_generate_op_package_writes_the_package(tmp_path):
    result = run("generate-op-package", FIXTURES / "example_op_package_htp.xml", "-o", tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"create    {tmp_path}/ExampleOpPackage/kernels/ExampleCustomOp.h" in result.stdout
    assert result.stdout.strip().endswith("wrote 16 files (16 create)")
    again = run("generate-op-package", FIXTURES / "example_op_package_htp.xml", "-o", tmp_path)
    assert again.stdout.strip().splitlines() == [f"{tmp_path}/ExampleOpPackage: wrote 0 files (16 unchanged)"]


def test_generate_defaults_to_the_current_directory(tmp_path):
    result = run("qnn-custom-ops", "generate", FIXTURES / "split_custom_op_package.xml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "SplitCustomOpPackage/src/ops/SplitCustomOp.cpp").is_file()


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    result = run("generate-op-package", DATA / "every_feature.xml", "-o", tmp_path / "out", "--dry-run")
    assert result.returncode == 0
    assert "create    " in result.stdout and "would write 19 files" in result.stdout
    assert not (tmp_path / "out").exists()


def test_validate_reports_ops_and_warnings(tmp_path):
    result = run("qnn-custom-ops", "validate", DATA / "every_feature.xml")
    assert result.returncode == 0
    assert result.stdout.strip() == "FeaturePackage: 2 op(s) valid: FusedNorm, TopTwo"
    assert len(result.stderr.strip().splitlines()) == 2
    assert all(": warning: " in line for line in result.stderr.strip().splitlines())


def test_invalid_config_exits_2_with_one_line_per_problem_and_writes_nothing(tmp_path):
    config = tmp_path / "bad.xml"
    config.write_text(opdef_xml(simple_op("class") + simple_op("Ok", backend="NPU")))
    result = run("generate-op-package", config, "-o", tmp_path / "out")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith(f"{config}:") for line in lines)
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", [b"", b"\x00\x01binary", b"<a>"])
def test_garbage_exits_2_without_traceback(tmp_path, content):
    config = tmp_path / "garbage.xml"
    config.write_bytes(content)
    result = run("qnn-custom-ops", "validate", config)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_unsafe_output_exits_2(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "ExampleOpPackage").symlink_to(tmp_path)
    result = run("generate-op-package", FIXTURES / "example_op_package_htp.xml", "-o", out)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "outside the output directory" in result.stderr


def test_usage_error_exits_2(tmp_path):
    assert run("qnn-custom-ops").returncode == 2
    assert run("generate-op-package").returncode == 2


def test_internal_error_exits_1_with_one_line(monkeypatch, capsys):
    import qnn_custom_ops.generator as generator

    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(generator, "generate", explode)
    code = cli.generate_op_package_main([str(FIXTURES / "example_op_package_htp.xml"), "-o", "/nonexistent"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.strip() == "internal error: RuntimeError: boom (rerun with QCO_DEBUG=1 and report it)"


def test_module_entry_point():
    result = subprocess.run([sys.executable, "-m", "qnn_custom_ops", "validate",
                             str(FIXTURES / "example_op_package_htp.xml")], capture_output=True, text=True)
    assert result.returncode == 0 and "ExampleOpPackage: 1 op(s) valid" in result.stdout


@pytest.mark.slow
def test_opdef_from_torch_writes_a_config_that_validates(tmp_path):
    env_path = str(DATA)
    config = tmp_path / "gated.xml"
    result = subprocess.run([str(BIN / "qnn-custom-ops"), "opdef-from-torch", "sample_ops:qco_sample.gated=Gated",
                             "--package", "GatedPackage", "-o", str(config)],
                            capture_output=True, text=True, env={**__import__("os").environ, "PYTHONPATH": env_path})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"wrote {config}: Gated"
    validate = run("qnn-custom-ops", "validate", config)
    assert validate.stdout.strip() == "GatedPackage: 1 op(s) valid: Gated"


def test_opdef_from_torch_unknown_module_or_op_exits_2(capsys):
    """In-process (the entry point runs as a real process in the test above)."""
    assert cli.main(["opdef-from-torch", "no_such_module:x.y", "--package", "P"]) == 2
    assert "cannot import no_such_module" in capsys.readouterr().err
    assert cli.main(["opdef-from-torch", "json:nope.nothing", "--package", "P"]) == 2
    assert "no torch op nope::nothing.default" in capsys.readouterr().err


def test_an_endless_config_is_refused_without_reading_it_all():
    """/dev/zero never ends: the read itself is bounded (the size limit used to come from stat())."""
    result = run("qnn-custom-ops", "validate", "/dev/zero")
    assert result.returncode == 2
    assert result.stderr.strip() == "/dev/zero:1: error: config is over the 4194304 byte limit (split the package into several configs)"


def test_a_config_from_a_pipe_is_read_once(tmp_path):
    config = (FIXTURES / "example_op_package_htp.xml").read_bytes()
    result = subprocess.run([str(BIN / "generate-op-package"), "/dev/stdin", "-o", str(tmp_path)], input=config,
                            capture_output=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ExampleOpPackage/config/stdin").read_bytes() == config


def test_outputs_never_replace_symlinks_or_special_files(tmp_path):
    import threading

    from qnn_custom_ops.atomic_files import UnsafeOutputError, write_atomic

    target = tmp_path / "target.xml"
    target.write_text("mine")
    link = tmp_path / "link.xml"
    link.symlink_to(target)
    with pytest.raises(UnsafeOutputError, match="is a symbolic link; refusing to replace it"):
        write_atomic(link, b"new")
    assert link.is_symlink() and target.read_text() == "mine"
    with pytest.raises(UnsafeOutputError, match="is not a regular file"):
        write_atomic(tmp_path, b"new")

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, b"through the pipe")  # a stream is written through, as -o /dev/stdout means
    reader.join(timeout=10)
    assert received == [b"through the pipe"] and fifo.exists() and not fifo.is_file()

    code = cli.main(["opdef-from-torch", "tests.data.sample_ops:qco_sample.gated", "--package", "P", "-o", str(link)])
    assert code == 2 and target.read_text() == "mine"


def test_opdef_from_torch_imports_modules_from_the_current_directory(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_user_ops.py").write_text(
        "import torch\nLIB = torch.library.Library('qco_cwd', 'DEF')\nLIB.define('scale(Tensor x, float s=2.0) -> Tensor')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert cli.main(["opdef-from-torch", "my_user_ops:qco_cwd.scale", "--package", "CwdPackage"]) == 0
    assert "<Name>Scale</Name>" in capsys.readouterr().out


@pytest.mark.slow
def test_build_host_prints_the_library_and_run_builds_it_itself(tmp_path, capsys, mul3_alone_pte):
    import torch

    package = str(REPO / "op_packages/ExampleOpPackage")
    bind = ["--bind", "ExampleCustomOp=my_ops::mul3", "--import", "tests.torch_ops"]
    assert cli.main(["build-host", package, *bind]) == 0
    library = Path(capsys.readouterr().out.strip())
    assert library.is_file() and library.name == "libqco_ExampleOpPackage_executorch.so"

    x = torch.randn(1, 2, 2, 4)
    torch.save(x, tmp_path / "x.pt")
    torch.save(x * 3, tmp_path / "golden.pt")
    assert cli.main(["run", str(mul3_alone_pte), "--inputs", str(tmp_path / "x.pt"),
                     "--golden", str(tmp_path / "golden.pt"), "--package", package, *bind]) == 0
    assert capsys.readouterr().out.strip().endswith("ok")
    assert cli.main(["build-host", package, "--bind", "ExampleCustomOp=nope::none"]) == 2
    assert "no torch op nope::none.default" in capsys.readouterr().err
    assert cli.main(["build-host", package]) == 2
    assert "no op of ExampleOpPackage is bound" in capsys.readouterr().err


@pytest.mark.slow
def test_run_calls_bad_input_bad_input(tmp_path, capsys, mul3_alone_pte):
    """Each is the user's input: exit 2 and one line naming the file, never an internal error."""
    import torch

    pte = mul3_alone_pte
    cases = {
        "dict.pt": ({"x": torch.zeros(1)}, "holds a dict, not a tensor"),
        "shape.pt": (torch.zeros(3), "float32 [3], the program's input is float32 [1, 2, 2, 4]"),
        "dtype.pt": (torch.zeros(1, 2, 2, 4, dtype=torch.int32), "int32 [1, 2, 2, 4], the program's input is float32"),
    }
    for name, (value, message) in cases.items():
        torch.save(value, tmp_path / name)
        assert cli.main(["run", str(pte), "--inputs", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(f"error: {tmp_path / name}: ") and message in err
    (tmp_path / "garbage.pt").write_bytes(b"not a pickle")
    assert cli.main(["run", str(pte), "--inputs", str(tmp_path / "garbage.pt")]) == 2
    assert "not a tensor saved with torch.save" in capsys.readouterr().err
    (tmp_path / "garbage.pte").write_bytes(b"\0" * 64)
    assert cli.main(["run", str(tmp_path / "garbage.pte"), "--inputs", str(tmp_path / "shape.pt")]) == 2
    assert "not an ExecuTorch program" in capsys.readouterr().err
    (tmp_path / "lib.so").write_text("not ELF")
    torch.save(torch.zeros(1, 2, 2, 4), tmp_path / "x.pt")
    assert cli.main(["run", str(pte), "--inputs", str(tmp_path / "x.pt"), "--library", str(tmp_path / "lib.so")]) == 2
    assert "not a shared library" in capsys.readouterr().err


def test_an_unwritable_destination_is_refused_before_anything_is_written(tmp_path):
    config = tmp_path / "pkg.xml"
    config.write_text(opdef_xml(simple_op("Keep")))
    assert cli.generate_op_package_main([str(config), "-o", str(tmp_path / "out")]) == 0
    package = tmp_path / "out/TestPackage"
    config.write_text(opdef_xml(simple_op("Keep") + simple_op("Added")))
    shutil.rmtree(package / "kernels")
    (package / "kernels").write_text("a file where the kernels directory should be")
    interface = (package / "src/TestPackageInterface.cpp").read_text()
    assert cli.generate_op_package_main([str(config), "-o", str(tmp_path / "out")]) == 2
    assert (package / "src/TestPackageInterface.cpp").read_text() == interface  # not rewritten to name Added
    assert not (package / "src/ops/Added.cpp").exists()


def test_opdef_from_torch_dtype_static_and_activations_round_trip_through_bind(tmp_path, monkeypatch, capsys):
    (tmp_path / "norm_ops.py").write_text(
        "import torch\nLIB = torch.library.Library('qco_norm', 'DEF')\n"
        "LIB.define('rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> Tensor')\n"
        "LIB.define('gather(Tensor table, Tensor indices) -> Tensor')\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "norm.xml"
    assert cli.main(["opdef-from-torch", "norm_ops:qco_norm.rms_norm", "norm_ops:qco_norm.gather",
                     "--package", "NormPackage", "--static", "weight", "--dtype", "indices=INT_32",
                     "--activations", "8,16", "-o", str(out)]) == 0
    package = qco.load_package(out)
    norm, gather = package.ops["RmsNorm"], package.ops["Gather"]
    assert norm.tensor("weight").is_static and [d.short_name for d in norm.datatypes("weight")] == [
        "FLOAT_32", "SFIXED_POINT_8", "UFIXED_POINT_8", "SFIXED_POINT_16"]
    assert [d.short_name for d in norm.datatypes("x")] == ["FLOAT_32", "UFIXED_POINT_8", "UFIXED_POINT_16"]
    assert [d.short_name for d in gather.datatypes("indices")] == ["INT_32"]
    import torch

    from qnn_custom_ops.torch_bridge.binding import MissingOutVariantWarning

    with pytest.warns(MissingOutVariantWarning):  # plain Library ops: no .out, fine for this check
        binding = qco.bind(package, {"RmsNorm": torch.ops.qco_norm.rms_norm.default,
                                     "Gather": torch.ops.qco_norm.gather.default})
    assert set(binding.ops) == {"RmsNorm", "Gather"}
    assert cli.main(["opdef-from-torch", "norm_ops:qco_norm.gather", "--package", "P", "--dtype", "indices=NOPE"]) == 2
    assert "expected ARG=DATATYPE" in capsys.readouterr().err


HOSTILE_SCHEMAS = {
    "no_input": ("(int n) -> Tensor", [], "has no Tensor argument"),
    "no_return": ("(Tensor x) -> ()", [], "returns ()"),
    "big_default": ("(Tensor x, int k=4294967296) -> Tensor", [], "does not fit INT_32: pass --dtype k=INT_64"),
    "str_default": ("(Tensor x, str mode='zzz') -> Tensor", ["--enum", "mode=mean,rms"],
                    "default 'zzz' of 'mode' is not one of its values"),
    "mutates": ("(Tensor(a!) x) -> Tensor", [], "argument 'x' is mutated"),
}


@pytest.fixture(scope="module")
def hostile_torch_ops(tmp_path_factory):
    """A module of torch ops whose configs would not load or bind, importable from its directory."""
    directory = tmp_path_factory.mktemp("hostile_ops")
    (directory / "qco_hostile_ops.py").write_text(
        "import torch\nLIB = torch.library.Library('qco_from_torch', 'DEF')\n"
        + "".join(f'LIB.define("{name}{schema}")\n' for name, (schema, _, _) in HOSTILE_SCHEMAS.items())
        + "LIB.define('big_default_ok(Tensor x, int k=4294967296) -> Tensor')\n"
        + "LIB.define('first(Tensor x) -> Tensor')\nLIB.define('second(Tensor x) -> Tensor')\n")
    return directory


@pytest.mark.parametrize("name", HOSTILE_SCHEMAS)
def test_opdef_from_torch_refuses_a_config_that_would_not_validate_or_bind(name, hostile_torch_ops, monkeypatch,
                                                                           capsys):
    _, options, message = HOSTILE_SCHEMAS[name]
    monkeypatch.chdir(hostile_torch_ops)
    out = hostile_torch_ops / f"{name}.xml"
    assert cli.main(["opdef-from-torch", f"qco_hostile_ops:qco_from_torch.{name}", "--package", "P", *options,
                     "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not out.exists()


def test_opdef_from_torch_widens_a_parameter_on_request_and_refuses_two_ops_of_one_type(hostile_torch_ops,
                                                                                        monkeypatch, capsys):
    monkeypatch.chdir(hostile_torch_ops)
    out = hostile_torch_ops / "widened.xml"
    assert cli.main(["opdef-from-torch", "qco_hostile_ops:qco_from_torch.big_default_ok", "--package", "P",
                     "--dtype", "k=INT_64", "-o", str(out)]) == 0
    param = qco.load_package(out).ops["BigDefaultOk"].tensor("k")
    assert [d.short_name for d in param.datatypes] == ["INT_64"] and param.default.value == 2**32
    assert cli.main(["opdef-from-torch", "qco_hostile_ops:qco_from_torch.first=Same",
                     "qco_hostile_ops:qco_from_torch.second=Same", "--package", "P"]) == 2
    err = capsys.readouterr().err
    assert "QNN op type Same is already qco_from_torch.first.default's" in err


def test_opdef_from_torch_checks_what_it_writes_by_loading_and_binding_it(monkeypatch):
    """A case no explicit check foresees is still refused: the XML is loaded and bound before it is returned."""
    import torch

    from qnn_custom_ops.torch_bridge import from_torch
    from qnn_custom_ops.errors import UsageError

    from tests.data import sample_ops  # noqa: F401  (registers qco_sample)

    monkeypatch.setattr(from_torch, "_PARAM_DATATYPE", {**from_torch._PARAM_DATATYPE,
                                                        from_torch.ArgKind.INT_LIST: "FLOAT_32"})
    with pytest.raises(UsageError, match="would not load and bind as written") as caught:
        from_torch.opdef_from_torch(torch.ops.qco_sample.gated.default, package="P")
    assert "use an integer datatype" in str(caught.value)


def test_a_user_module_that_fails_to_import_is_the_users_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_user_ops.py").write_text("import torch\ndef broken(:\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["opdef-from-torch", "broken_user_ops:x.y", "--package", "P"]) == 2
    err = capsys.readouterr().err
    assert "importing broken_user_ops raised SyntaxError" in err and err.count("\n") == 1


def test_a_user_module_that_calls_sys_exit_is_reported(tmp_path, monkeypatch, capsys):
    (tmp_path / "exiting_user_ops.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.chdir(tmp_path)
    package = str(REPO / "op_packages/ExampleOpPackage")
    assert cli.main(["build-host", package, "--bind", "ExampleCustomOp=my_ops::mul3",
                     "--import", "exiting_user_ops"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "importing exiting_user_ops called sys.exit(0)" in err[0], err


@pytest.mark.slow
def test_ctrl_c_during_build_host_is_an_interrupt_and_leaves_the_cache_clean(tmp_path):
    """SIGINT to the whole group (as a terminal's Ctrl-C) while the compiler runs: exit 130,
    nothing of the build left in the cache, and the next build succeeds."""
    import signal
    import time

    started = tmp_path / "compiler-started"
    slow = tmp_path / "slow-c++"
    slow.write_text(f'#!/bin/sh\ncase "$*" in *executorch_kernels*) touch {started}; sleep 60;; esac\n'
                    'exec g++ "$@"\n')
    slow.chmod(0o755)
    cache = tmp_path / "cache"
    package = REPO / "op_packages/ExampleOpPackage"
    (tmp_path / "mul3_ops.py").write_text(
        "import qnn_custom_ops as qco\n"
        f"package = qco.load_package({str(package / 'config/ExampleOpPackage.xml')!r})\n"
        "qco.define_torch_ops(package, 'my_ops', {'ExampleCustomOp': lambda input: input * 3}, "
        "names={'ExampleCustomOp': 'mul3'})\n")
    command = [str(BIN / "qnn-custom-ops"), "build-host", str(package), "--bind", "ExampleCustomOp=my_ops::mul3",
               "--import", "mul3_ops"]
    env = {**os.environ, "QCO_CACHE_DIR": str(cache), "CXX": str(slow), "QNN_SDK_ROOT": ""}
    build = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not started.exists() and build.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), build.communicate()
    os.killpg(build.pid, signal.SIGINT)
    out, err = build.communicate(timeout=60)
    assert (build.returncode, out, err.strip()) == (130, "", "interrupted (Ctrl-C)")
    assert sorted(p.name for p in (cache / "executorch").iterdir() if p.suffix != ".lock") == []
    env["CXX"] = "g++"
    again = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and Path(again.stdout.strip()).is_file(), again.stderr


def test_our_warnings_are_one_line_without_the_code_that_warned(capsys):
    """A warning of ours reads as the sentence it was written as, not Python's
    ``path/cli.py:198: Category: ...`` followed by the source line that warned."""
    import warnings

    from qnn_custom_ops.llm_ops.swap import SwapWarning

    def handler(args):
        warnings.warn(SwapWarning("layers.0.norm stays native (use select='none')"), stacklevel=1)
        return 0

    assert run_handler(handler, None) == 0
    assert capsys.readouterr().err == "warning: layers.0.norm stays native (use select='none')\n"


@pytest.mark.slow
def test_build_host_on_an_op_without_out_variant_is_one_line_with_the_fix(tmp_path):
    """The torch-first route (opdef-from-torch, generate, build-host) on a torch.library.custom_op:
    build-host says, once, how to add the .out variant -- no warning naming an internal file."""
    (tmp_path / "swish_ops.py").write_text(
        "import torch\n"
        "@torch.library.custom_op('my_ops::swish', mutates_args=())\n"
        "def swish(x: torch.Tensor) -> torch.Tensor:\n"
        "    return x * torch.sigmoid(x)\n"
        "swish.register_fake(lambda x: torch.empty_like(x))\n")
    steps = [["opdef-from-torch", "swish_ops:my_ops.swish=Swish", "--package", "SwishPackage", "-o", "swish.xml"],
             ["generate", "swish.xml", "-o", "out"]]
    for step in steps:
        assert run("qnn-custom-ops", *step, cwd=tmp_path).returncode == 0
    result = run("qnn-custom-ops", "build-host", "out/SwishPackage", "--bind", "Swish=my_ops::swish",
                 "--import", "swish_ops", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: my_ops::swish.out is not defined: to_executorch needs the out variant (add it with "
        "qnn_custom_ops.register_out_variant(torch.ops.my_ops.swish.default))"]


@pytest.mark.parametrize("command", [["validate", FIXTURES / "example_op_package_htp.xml"],
                                     ["generate", FIXTURES / "example_op_package_htp.xml", "-o", "out", "--dry-run"]])
def test_standard_output_on_a_full_device_is_one_line_and_exit_2(command, tmp_path):
    """``>/dev/full``: print's OSError names standard output, exit 2, and nothing more is said
    when the interpreter flushes the stream on its way out."""
    with open("/dev/full", "w") as full:
        result = subprocess.run([str(BIN / "qnn-custom-ops"), *map(str, command)], stdout=full,
                                stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, "error: standard output: cannot be written: No space left on "
                                                     "device (ENOSPC) (free some space, or send it elsewhere)\n")


def test_a_reader_that_stops_reading_gets_no_complaint():
    """``| head -0``: a closed pipe is the reader's choice, not an error to print (exit 2)."""
    command = [str(BIN / "qnn-custom-ops"), "validate", str(FIXTURES / "example_op_package_htp.xml")]
    reader = subprocess.Popen(["head", "-c", "0"], stdin=subprocess.PIPE)
    reader.wait()
    result = subprocess.run(command, stdout=reader.stdin, stderr=subprocess.PIPE, text=True)
    reader.stdin.close()
    assert (result.returncode, result.stderr) == (2, "")


LONG_COMMANDS = [["build-host", "P"], ["cost", "P"], ["hexagon-check", "P"], ["htp-check", "P"],
                 ["run", "m.pte"], ["llm", "export", "C", "-o", "O"], ["llm", "generate", "O", "--prompt", "x"],
                 ["llm", "eval", "O", "--text", "t"], ["llm", "analyze", "C", "--quant", "16a4w"]]


@pytest.mark.parametrize("command", LONG_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_every_long_command_takes_progress_or_quiet_and_not_both(command, monkeypatch, capsys):
    """One way to ask for progress lines: ``--progress`` shows them when stderr is no terminal,
    ``--quiet`` hides them on one, and the two together are refused. The command's one
    ``Progress`` (``command_progress``) says them on stderr, after the seconds so far when timed."""
    from qnn_custom_ops.cli.arguments import command_progress

    parser = cli.build_parser()

    def said(argv: list[str], timed: bool = False) -> str:
        command_progress(parser.parse_args(argv), timed)("a step")
        return capsys.readouterr().err

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert said(command) == ""
    assert said([*command, "--progress"]) == "a step\n"
    assert re.fullmatch(r"\[ *\d+\.\ds\] a step\n", said([*command, "--progress"], timed=True))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert said(command) == "a step\n"
    assert said([*command, "--quiet"]) == ""
    with pytest.raises(SystemExit) as refused:
        parser.parse_args([*command, "--progress", "--quiet"])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "not allowed with argument" in err and err.count("\n") == 1, err


#: Every parser given an option it does not take (after what it needs), and the name its line gives.
BAD_OPTIONS = [
    (cli.main, ["--no-such-option", "validate", "c.xml"], "qnn-custom-ops"),
    (cli.main, ["validate", "c.xml", "--no-such-option"], "qnn-custom-ops validate"),
    (cli.main, ["generate", "c.xml", "--no-such-option"], "qnn-custom-ops generate"),
    (cli.main, ["opdef-from-torch", "m:op", "--package", "P", "--no-such-option"], "qnn-custom-ops opdef-from-torch"),
    (cli.main, ["run", "m.pte", "--no-such-option"], "qnn-custom-ops run"),
    (cli.main, ["build-host", "P", "--no-such-option"], "qnn-custom-ops build-host"),
    (cli.main, ["cost", "P", "--no-such-option"], "qnn-custom-ops cost"),
    (cli.main, ["hexagon-check", "P", "--no-such-option"], "qnn-custom-ops hexagon-check"),
    (cli.main, ["htp-check", "P", "--no-such-option"], "qnn-custom-ops htp-check"),
    (cli.main, ["llm", "--no-such-option", "families"], "qnn-custom-ops llm"),
    (cli.main, ["llm", "families", "--no-such-option"], "qnn-custom-ops llm families"),
    (cli.main, ["llm", "export", "C", "-o", "O", "--no-such-option"], "qnn-custom-ops llm export"),
    (cli.main, ["llm", "generate", "O", "--prompt", "x", "--no-such-option"], "qnn-custom-ops llm generate"),
    (cli.main, ["llm", "eval", "O", "--text", "t", "--no-such-option"], "qnn-custom-ops llm eval"),
    (cli.main, ["llm", "analyze", "C", "--quant", "16a4w", "--no-such-option"], "qnn-custom-ops llm analyze"),
    (cli.generate_op_package_main, ["c.xml", "--no-such-option"], "generate-op-package"),
]


@pytest.mark.parametrize("main, argv, name", BAD_OPTIONS, ids=[name for _, _, name in BAD_OPTIONS])
def test_an_option_no_parser_takes_is_one_line_naming_the_command_and_exit_2(main, argv, name, capsys):
    """argparse prints a usage block of several lines before its error: every parser says one
    line instead (the ``llm`` commands' format), naming the command whose ``--help`` lists its
    options, not the top-level parser argparse leaves an unknown option to."""
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert (refused.value.code, capsys.readouterr().err) == (
        2, f"error: {name}: unrecognized arguments: --no-such-option; see {name} --help\n")
