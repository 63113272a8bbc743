"""Shared test helpers: paths of the real fixtures and a writer for inline configs."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import socket
from pathlib import Path
from typing import Callable

import pytest
from filelock import FileLock

# executorch's QNN helpers download the SDK when QNN_SDK_ROOT is unset; an empty value stops them.
os.environ.setdefault("QNN_SDK_ROOT", "")
# Host builds made by the tests go to a cache of this run, never the user's ~/.cache. The
# pytest-xdist workers share the cache of the process that started them (builds are process-safe).
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("QCO_TEST_RUN_CACHE"):
    TEST_CACHE = Path(os.environ["QCO_TEST_RUN_CACHE"])
else:
    TEST_CACHE = Path(tempfile.mkdtemp(prefix="qco-test-cache-"))
    os.environ["QCO_TEST_RUN_CACHE"] = str(TEST_CACHE)
    atexit.register(shutil.rmtree, TEST_CACHE, ignore_errors=True)
os.environ["QCO_CACHE_DIR"] = str(TEST_CACHE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` first, the rest in their order: with ``--dist load
    --maxschedchunk 1`` each worker takes the next test when it is free, so the long ones
    start early and the workers end together instead of one finishing a long test alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def shared_build(name: str, build: Callable[[Path], None]) -> Path:
    """``TEST_CACHE/name``, filled by ``build`` once per run: the first xdist worker to get
    here builds, the others wait on the lock and reuse it (treat it as read-only)."""
    root = TEST_CACHE / name
    with FileLock(str(root) + ".lock"):
        if not (root / ".complete").exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            build(root)
            (root / ".complete").touch()
    return root


#: (file under kernels/, original text, changed text)
KernelChange = tuple[str, str, str]


@pytest.fixture
def hvx_changed_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """``changed(name, changes)``: a copy of the shipped package ``name`` with ``changes``
    applied (each original once in its file), for the tests that show the Hexagon check catches
    a changed HVX path. Each original is one line calling an HVX intrinsic (``Q6_...``), which
    only the Hexagon build compiles: the copy's host build would compile the shipped package's
    code, so the check's host half runs the shipped build (one per run, shared) instead of
    building the copy (LlmOpPackage: 10 CPU-seconds a copy)."""
    from qnn_custom_ops.progress import silent
    from qnn_custom_ops.runtime import build_host_kernels
    from qnn_custom_ops.runtime.hexagon import check  # the module whose globals hexagon_check reads
    from qnn_custom_ops.runtime.host_build import GeneratedPackage

    def changed(name: str, changes: list[KernelChange]) -> Path:
        package_dir = Path(shutil.copytree(OP_PACKAGES / name, tmp_path / name, ignore=shutil.ignore_patterns("build")))
        for file, original, new in changes:
            assert "Q6_" in original and "\n" not in original, f"{original!r}: no line of HVX code"
            source = package_dir / "kernels" / file
            assert source.read_text().count(original) == 1
            source.write_text(source.read_text().replace(original, new))
        shipped = build_host_kernels(OP_PACKAGES / name)
        copy = package_dir.resolve()

        def host_build(package, progress=silent) -> Path:
            """The shipped package's build for the copy, any other package built as it is."""
            if GeneratedPackage.at(package).directory == copy:
                return shipped
            return build_host_kernels(package, progress=progress)

        monkeypatch.setattr(check, "build_host_kernels", host_build)
        return package_dir

    return changed


def example_package_with_kernel(root: Path, kernel: str) -> Path:
    """A copy of the shipped ExampleOpPackage in ``root`` (without its build) whose kernel header
    is ``kernel``: the package the tests of a misbehaving kernel build."""
    package_dir = root / "ExampleOpPackage"
    shutil.copytree(OP_PACKAGES / "ExampleOpPackage", package_dir, ignore=shutil.ignore_patterns("build"))
    (package_dir / "kernels/ExampleCustomOp.h").write_text(kernel)
    return package_dir


def assert_hexagon_bit_exact(package: str, cases: list) -> None:
    """Every case of the shipped ``package`` computes the host build's bits under qemu-hexagon."""
    from qnn_custom_ops.runtime.hexagon import hexagon_check

    failed = [str(r) for r in hexagon_check(OP_PACKAGES / package, cases) if not r.passed]
    assert not failed, "\n".join(failed)


def sqnr_db(reference, approximation) -> float:
    """10 log10 of the reference's power over the error's, in dB (inf when equal)."""
    import torch

    reference, approximation = reference.detach().double(), approximation.detach().double()
    return float(10 * torch.log10(reference.pow(2).sum() / (reference - approximation).pow(2).sum()))


REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
#: The stand-in of the QNN SDK's x86 HTP toolchain (its clang++ and headers), and the test doubles
#: of a phone (adb) and of the device runner: what cannot exist on this machine.
STANDIN = Path(__file__).resolve().parent / "htp_standin"
DOUBLES = Path(__file__).resolve().parent / "doubles"
# Real public OpDef configs, kept in the repository: a clone needs nothing beside it.
FIXTURES = DATA / "opdef_fixtures"
FIXTURE_CONFIGS = sorted(FIXTURES.glob("*.xml"))
assert FIXTURE_CONFIGS, f"no OpDef fixtures under {FIXTURES}"
OP_PACKAGES = REPO / "op_packages"
#: The README and the pages of docs/: the texts whose snippets the suite runs as written.
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def doc_block(page: str, after: str, language: str = "python") -> str:
    """The first ```language block of ``page`` (``README.md`` or ``docs/NAME.md``) after the
    text ``after``: a snippet a reader copies, run by a test so it cannot drift from what works."""
    (block,) = re.findall(re.escape(after) + rf".*?```{language}\n(.*?)```", (REPO / page).read_text(), re.S)
    return block


def opdef_xml(ops: str, package: str = "TestPackage", extra: str = "") -> str:
    """A config wrapping ``ops`` (OpDef elements) in the collection boilerplate."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<OpDefCollection PackageName="{package}" Domain="test" Version="1.0">\n'
        f"  <OpDefList>\n{ops}\n  </OpDefList>\n{extra}\n</OpDefCollection>\n"
    )


def simple_op(name: str = "Simple", body: str = "", backend: str = "HTP") -> str:
    """An op with one float input and output, plus ``body`` (extra tensors) before the backend."""
    return f"""\
    <OpDef>
      <Name>{name}</Name>
      <Input><Name>x</Name><Mandatory>true</Mandatory>
        <Datatype>QNN_DATATYPE_FLOAT_32</Datatype><Shape><Rank>ND</Rank></Shape></Input>
      <Output><Name>y</Name><Mandatory>true</Mandatory>
        <Datatype>QNN_DATATYPE_FLOAT_32</Datatype><Shape><Rank>ND</Rank></Shape></Output>
      {body}
      <SupportedBackend>{backend}</SupportedBackend>
    </OpDef>"""


@pytest.fixture
def write_config(tmp_path):
    """Write text (or bytes) to a config file and return its path."""

    def write(content: str | bytes, name: str = "config.xml") -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return path

    return write


@pytest.fixture(autouse=True)
def seeded():
    """Every test starts from the same random state: an input a test forgot to seed is still
    the same on every run, whichever xdist worker runs it and after whichever test."""
    import random

    import numpy as np
    import torch

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def no_network():
    """Fail any test that connects anywhere but this machine."""
    real_connect = socket.socket.connect

    def guarded_connect(sock, address):
        if isinstance(address, tuple) and not (str(address[0]).startswith("127.") or address[0] in ("localhost", "::1")):
            raise RuntimeError(f"a test tried to reach the network: {address}")
        return real_connect(sock, address)

    socket.socket.connect = guarded_connect
    yield
    socket.socket.connect = real_connect


@pytest.fixture(scope="session")
def mul3_alone_pte() -> Path:
    """A program of my_ops::mul3 alone on a float32 [1, 2, 2, 4] input, lowered once per run
    (``shared_build``: one xdist worker lowers, the others read the file) for the tests that
    only need some real program to run or feed bad input to."""

    def lower_into(root: Path) -> None:
        import torch

        import qnn_custom_ops as qco

        from .torch_ops import EXAMPLE_PACKAGE, MUL3

        class Mul3Alone(torch.nn.Module):
            def forward(self, x):
                return MUL3(x)

        binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})
        qco.lower(Mul3Alone(), (torch.randn(1, 2, 2, 4),), binding, output=root / "m.pte")

    return shared_build("mul3-alone", lower_into) / "m.pte"


# --- no program is lowered twice in one run ----------------------------------------------------
# Every ``lower`` of the run is recorded (what is lowered: the model's class or converted graph,
# the input shapes, the binding and the options) with the test that asked for it; the run fails
# when one process lowered the same program twice: share it through a fixture instead.
LOWERINGS = TEST_CACHE / "lowerings.tsv"


def _lowering_key(model, example_inputs, binding, args, options) -> str:
    import hashlib

    import torch

    structure = model.code if isinstance(model, torch.fx.GraphModule) else repr(model)  # the modules it holds
    what = f"{type(model).__module__}.{type(model).__qualname__}:{hashlib.sha1(structure.encode()).hexdigest()[:12]}"
    shapes = ",".join(f"{tuple(t.shape)}{t.dtype}" for t in example_inputs if isinstance(t, torch.Tensor))
    chosen = ",".join([*map(str, args), *(f"{k}={v}" for k, v in sorted(options.items()) if k != "output")])
    return f"{what} [{shapes}] {binding.package.name}:{','.join(sorted(binding.ops))} {chosen}"


@pytest.fixture(autouse=True, scope="session")
def lowerings_recorded():
    import qnn_custom_ops
    import qnn_custom_ops.lowering as lowering
    from qnn_custom_ops.lowering import program

    real_lower = program.lower

    def recorded(model, example_inputs, binding, *args, **options):
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        key = _lowering_key(model, example_inputs, binding, args, options)
        with FileLock(str(LOWERINGS) + ".lock"), LOWERINGS.open("a") as log:
            log.write(f"{os.getpid()}\t{key}\t{test}\n")
        return real_lower(model, example_inputs, binding, *args, **options)

    program.lower = lowering.lower = qnn_custom_ops.lower = recorded
    yield
    program.lower = lowering.lower = real_lower
    qnn_custom_ops.__dict__.pop("lower", None)


def twice_lowered(lines: list[str]) -> list[str]:
    """The programs one process lowered more than once, with the tests that did."""
    seen: dict[tuple[str, str], list[str]] = {}
    for line in lines:
        pid, key, test = line.rstrip("\n").split("\t")
        seen.setdefault((pid, key), []).append(test)
    return [f"{key}: {', '.join(tests)}" for (_, key), tests in sorted(seen.items()) if len(tests) > 1]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput") or not LOWERINGS.exists():
        return
    repeated = twice_lowered(LOWERINGS.read_text().splitlines())
    if repeated:
        session.config.get_terminal_writer().line("programs lowered twice in one process:\n  " + "\n  ".join(repeated))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
