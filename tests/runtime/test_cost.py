"""qnn-custom-ops cost: seconds per call and bytes moved per op and shape, from the same
measurement code as benchmarks/bench_llm_ops.py."""

from __future__ import annotations

import os

import pytest

from qnn_custom_ops.cli import main

from tests.conftest import OP_PACKAGES


@pytest.mark.slow
def test_cost_prints_time_bytes_and_bandwidth_per_op_and_shape(capsys):
    affinity = os.sched_getaffinity(0)
    assert main(["cost", str(OP_PACKAGES / "ExampleOpPackage"), "--min-seconds", "0.001",
                 "--shape", "ExampleCustomOp:output=1x4x64x64,input=1x4x64x64",
                 "--shape", "ExampleCustomOp:output=1x1x1x8,input=1x1x1x8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ExampleOpPackage on one core") and "copy bandwidth" in lines[0]
    big, small = (line.split() for line in lines[2:4])
    assert big[:2] == ["ExampleCustomOp", "1x4x64x64"] and int(big[3]) == 2 * 4 * 64 * 64 * 4  # read + write
    assert small[1] == "1x1x1x8" and int(small[3]) == 2 * 8 * 4
    assert float(big[2].removesuffix("us")) > 0
    assert os.sched_getaffinity(0) == affinity  # pinned while measuring only


@pytest.mark.slow
def test_cost_of_the_llm_package_uses_its_own_shapes(capsys):
    assert main(["cost", str(OP_PACKAGES / "LlmOpPackage"), "--min-seconds", "0.0001"]) == 0
    ops = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]]
    assert ops == ["RmsNorm", "SiluAndMul", "GeluAndMul", "Rope", "CtxScatter", "CtxGather"] * 2


@pytest.mark.parametrize("shape, message", [
    (["--shape", "ExampleCustomOp:input=1x4"], "name every input and output of ExampleCustomOp once .*missing: output"),
    (["--shape", "Nope:x=1"], "'Nope' is not an op of ExampleOpPackage"),
    (["--shape", "ExampleCustomOp:output=1x4,input=1xfour"], "'1xfour' is not a shape"),
    ([], "say what to measure with --shape"),
    (["--dtype", "NOPE", "--shape", "ExampleCustomOp:output=1x4,input=1x4"], "--dtype 'NOPE' is not a datatype"),
    (["--dtype", "INT_32", "--shape", "ExampleCustomOp:output=1x4,input=1x4"],
     "ExampleCustomOp declares no output datatype INT_32 \\(it declares FLOAT_32, UFIXED_POINT_8\\)"),
])
def test_cost_refuses_what_it_cannot_measure_in_one_line(capsys, shape, message):
    import re

    assert main(["cost", str(OP_PACKAGES / "ExampleOpPackage"), *shape]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err


@pytest.mark.parametrize("seconds", ["nan", "inf", "-1", "0"])
def test_cost_refuses_a_timing_round_that_is_not_a_number_of_seconds(capsys, seconds):
    with pytest.raises(SystemExit) as exited:
        main(["cost", str(OP_PACKAGES / "ExampleOpPackage"), "--min-seconds", seconds])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"{seconds!r} is not a number of seconds in (0, 60]" in err, err


@pytest.mark.parametrize("shape, message", [
    ("ExampleCustomOp:output=100000x100000x100000x100000,input=1x1x1x1",
     "the tensors need .* GB, more than a quarter of this machine's memory"),
    ("ExampleCustomOp:output=1x1x1x4,input=1x1x1x4,input=1x1x1x8",
     "input is given twice \\(1x1x1x4 and 1x1x1x8\\): give each tensor once"),
])
def test_cost_refuses_absurd_shapes_and_a_tensor_given_twice(capsys, shape, message):
    import re

    assert main(["cost", str(OP_PACKAGES / "ExampleOpPackage"), "--shape", shape]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err


@pytest.mark.slow
def test_cost_measures_int32_inputs_given_with_shape(capsys):
    assert main(["cost", str(OP_PACKAGES / "LlmOpPackage"), "--min-seconds", "0.001",
                 "--shape", "CtxGather:out=1x2x16x64,cache=1x2x128x64,ctx_indices=1x16"]) == 0
    (row,) = capsys.readouterr().out.splitlines()[2:]
    assert row.split()[:2] == ["CtxGather", "1x2x128x64"]


@pytest.mark.slow
def test_a_package_directory_named_otherwise_builds_under_its_package_name(tmp_path, capsys):
    """The library and its C ABI are named after the config's PackageName, not the directory."""
    import shutil

    renamed = tmp_path / "my_checkout_of_the_example"
    shutil.copytree(OP_PACKAGES / "ExampleOpPackage", renamed, ignore=shutil.ignore_patterns("build"))
    assert main(["cost", str(renamed), "--min-seconds", "0.001",
                 "--shape", "ExampleCustomOp:output=1x1x2x8,input=1x1x2x8"]) == 0
    assert capsys.readouterr().out.startswith("ExampleOpPackage on one core")


@pytest.mark.slow
def test_cost_measures_the_datatypes_dtype_names(capsys):
    assert main(["cost", str(OP_PACKAGES / "ExampleOpPackage"), "--min-seconds", "0.001",
                 "--dtype", "UFIXED_POINT_8", "--shape", "ExampleCustomOp:output=1x1x2x8,input=1x1x2x8"]) == 0
    (row,) = capsys.readouterr().out.splitlines()[2:]
    assert row.split()[:3] == ["ExampleCustomOp", "UFIXED_POINT_8", "1x1x2x8"] and int(row.split()[4]) == 2 * 16


def test_dtype_takes_its_shapes_from_shape(capsys):
    """A shipped package's own cost cases are float32: other datatypes need --shape."""
    assert main(["cost", str(OP_PACKAGES / "LlmOpPackage"), "--dtype", "UFIXED_POINT_8"]) == 2
    assert "--dtype needs --shape" in capsys.readouterr().err
