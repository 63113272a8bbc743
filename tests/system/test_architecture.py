"""The shape of the package: data flows one way, and binding changes nothing in ExecuTorch."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from executorch.backends.qualcomm.builders import node_visitor_manager

import qnn_custom_ops as qco
from qnn_custom_ops.lowering.op_builder import BindingConflictError, bound_visitors

from tests.conftest import REPO
from tests.torch_ops import EXAMPLE_PACKAGE, MUL3, QUANT_PACKAGE, ConvMul3

SOURCE = REPO / "src" / "qnn_custom_ops"

# DESIGN.md's picture, top to bottom: a module may import its own layer or the ones above.
LAYERS = {
    "opdef": 0, "errors": 0, "lazy": 0, "qnn_sdk": 0, "qairt": 0, "quiet": 0, "atomic_files": 0, "progress": 0,
    "generated_code": 0, "heap": 0,
    "generator": 1, "torch_bridge": 1,
    "quantizer": 2, "lowering": 2,
    "runtime": 3,
    "llm_ops": 4,
    "llm": 5,
    "library": 6, "cli": 6, "__init__": 6, "__main__": 6,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module of ours that ``path`` imports, at any depth of the file (function-local too)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            target = f"{base}.{node.module}" if node.module else base
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("qnn_custom_ops"):
            found.add(node.module)
    return found


def our_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in SOURCE.rglob("*.py")}
    return {name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()}


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else "__init__"]


def test_no_import_reaches_a_higher_layer():
    upward = [f"{a} -> {b}" for a, targets in our_graph().items() for b in targets if layer(b) > layer(a)]
    assert upward == []


def test_the_import_graph_has_no_cycle():
    graph = our_graph()
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(target):] + [target]))
            if target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The check can fail: a torch bridge module importing the runtime is caught."""
    graph = our_graph()
    graph["qnn_custom_ops.torch_bridge.spec"].add("qnn_custom_ops.runtime.host_library")
    assert any(layer(b) > layer(a) for a, targets in graph.items() for b in targets)


def test_the_old_library_package_gives_every_name_it_gave_from_where_it_lives_now():
    """``qnn_custom_ops.library`` is an alias kept for one release (CHANGELOG): each name it gave is
    the very object of ``llm_ops`` or ``llm``."""
    import qnn_custom_ops.library as old
    from qnn_custom_ops import llm, llm_ops

    assert sorted(old.__all__) == sorted([*llm_ops.__all__, *llm.__all__])
    for name in old.__all__:
        assert getattr(old, name) is getattr(llm_ops if name in llm_ops.__all__ else llm, name), name


def test_reading_generating_and_calling_kernels_start_without_torch():
    """validate, generate, the kernel C ABI (KernelLibrary, build_host_kernels) and ``cost``
    need only numpy: torch and executorch are imported when their side of the flow is used."""
    code = ("import sys\n"
            "from qnn_custom_ops import cli, load_package\n"
            "from qnn_custom_ops.generator import generate\n"
            "from qnn_custom_ops.runtime import KernelDType, KernelLibrary, KernelTensor, build_host_kernels\n"
            "from qnn_custom_ops.runtime.cost import measure\n"
            "print(sorted(m for m in ('torch', 'executorch') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.slow
def test_binding_and_lowering_leave_executorchs_visitor_in_place(tmp_path, monkeypatch):
    from tests.qnn_wrappers import fake_op_package_library

    original = node_visitor_manager.CustomOp
    binding = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})
    assert node_visitor_manager.CustomOp is original
    with bound_visitors(binding):
        assert node_visitor_manager.CustomOp is not original
    assert node_visitor_manager.CustomOp is original

    monkeypatch.setenv("QNN_SDK_ROOT", "")
    builds = [qco.OpPackageBuild("HTP", "x86_64", fake_op_package_library(tmp_path, "ExampleOpPackage"))]
    with pytest.raises(qco.QnnSdkMissingError):  # the lowering stops here without the SDK ...
        qco.lower(ConvMul3().eval(), (torch.randn(1, 3, 8, 8),), binding, target="qnn",
                  compile_spec=qco.compile_spec("SM8650", binding, builds))
    assert node_visitor_manager.CustomOp is original  # ... and still puts executorch's visitor back


def test_one_torch_op_bound_to_two_opdefs_in_one_lowering_is_refused():
    first = qco.bind(EXAMPLE_PACKAGE, {"ExampleCustomOp": MUL3})
    second = qco.bind(QUANT_PACKAGE, {"FloatOnly": MUL3})
    with bound_visitors(first):
        with pytest.raises(BindingConflictError, match=r"my_ops\.mul3\.default is bound to "
                                                        r"ExampleOpPackage::ExampleCustomOp and to "
                                                        r"QuantTestPackage::FloatOnly in one lowering"):
            with bound_visitors(second):
                pass
        with bound_visitors(first):  # the same binding again is fine
            pass


@pytest.mark.parametrize("value, said", [(None, "QNN_SDK_ROOT is unset"), ("", "QNN_SDK_ROOT is set but empty"),
                                         ("/nowhere", "QNN_SDK_ROOT is /nowhere")])
def test_the_missing_sdk_message_says_what_is_true(monkeypatch, value, said):
    from qnn_custom_ops.qnn_sdk import require_sdk

    if value is None:
        monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    else:
        monkeypatch.setenv("QNN_SDK_ROOT", value)
    with pytest.raises(qco.QnnSdkMissingError, match=re.escape(f"({said})")):
        require_sdk("QNN partitioning")


def test_every_datatype_map_comes_from_the_one_table():
    """One row per QNN datatype; the kernel ABI, the HTP adapter and the host adapter are
    rendered from the rows (a row's ExecuTorch ScalarType reaches the host adapter's switch)."""
    from qnn_custom_ops.generator.abi import KernelDType
    from qnn_custom_ops.generator.render import adapter_context
    from qnn_custom_ops.opdef import Datatype
    from qnn_custom_ops.opdef.datatypes import DATATYPES
    from qnn_custom_ops.generator import executorch_library

    assert set(DATATYPES) == set(Datatype)
    kernel_rows = [r for r in DATATYPES.values() if r.kernel is not None]
    assert {d.name for d in KernelDType} == {r.kernel for r in kernel_rows}
    assert len({r.kernel_value for r in kernel_rows}) == len(kernel_rows)
    carried = {kernel for _, kernels in adapter_context()["carriers"] for kernel in kernels}
    assert carried == {r.kernel for r in kernel_rows if r.htp is not None}
    assert ("UInt32", "UInt32") in executorch_library._SCALAR_TYPES  # from the UINT_32 row alone


def test_every_error_class_of_ours_is_a_reported_error():
    """The CLI prints a ReportedError as its one line and exits 2; any other exception of ours
    would be an 'internal error'."""
    import importlib
    import inspect

    from qnn_custom_ops.errors import ReportedError

    outside = []
    for path in SOURCE.rglob("*.py"):
        if path.name == "__main__.py":  # importing it runs the CLI
            continue
        module = importlib.import_module(module_name(path))
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, Exception) and not issubclass(value, Warning) \
                    and value.__module__ == module.__name__ \
                    and not issubclass(value, ReportedError):
                outside.append(f"{module.__name__}.{name}")
    assert outside == []
