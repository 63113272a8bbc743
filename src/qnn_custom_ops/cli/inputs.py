"""What several commands read from their arguments: OpDef configs, a generated package's
configs, the user's modules and the torch ops they register, and a host library built from
``--bind``."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..opdef import OpDefWarning, OpPackage, load_package
from ..progress import Progress

if TYPE_CHECKING:
    from ..runtime.host_build import GeneratedPackage


def load_configs(configs: Sequence[str]) -> OpPackage:
    """Load configs, printing each tolerated oddity as its one-line warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OpDefWarning)
        package = load_package(*configs)
    for warning in caught:
        print(str(warning.message), file=sys.stderr)
    return package


def import_user_module(module: str, where: str) -> None:
    """Import a module of the user's, from the current directory too (as ``python -m`` would)."""
    import importlib

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"{where}: cannot import {module} from the current directory or sys.path: {exc}") from exc
    except Exception as exc:  # the user's module failed while importing: their code, their error
        raise UsageError(f"{where}: importing {module} raised {type(exc).__name__}: {exc}") from exc
    except SystemExit as exc:  # would end the command with no word of what it did not do
        raise UsageError(
            f"{where}: importing {module} called sys.exit({exc.code!r}): a module given here must "
            "only register ops (put its script part under if __name__ == '__main__':)"
        ) from exc


def torch_overload(name: str, where: str, hint: str):
    """``ns.op[.overload]`` or ``ns::op[.overload]`` -> the registered torch overload."""
    import torch

    parts = name.replace("::", ".").split(".")
    if len(parts) not in (2, 3):
        raise UsageError(f"{where}: name the op as NAMESPACE.OP or NAMESPACE.OP.OVERLOAD")
    namespace, op, overload = (*parts, "default")[:3]
    try:
        return getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except (AttributeError, RuntimeError) as exc:
        raise UsageError(f"{where}: no torch op {namespace}::{op}.{overload} {hint}") from exc


def package_configs(package_dir: str) -> list[Path]:
    configs = sorted(Path(package_dir).glob("config/*.xml"))
    if not configs:
        raise UsageError(f"{package_dir}: no config/*.xml (is it a package made by generate-op-package?)")
    return configs


def generated_package(package_dir: str) -> GeneratedPackage:
    """The package in ``package_dir`` resolved once (its configs' oddities printed as warnings):
    the value every build and check of a kernel command is given."""
    from ..runtime.host_build import GeneratedPackage

    return GeneratedPackage(Path(package_dir).resolve(), load_configs([str(c) for c in package_configs(package_dir)]))


def host_library_of(package_dir: str, binds: Sequence[str], modules: Sequence[str], progress: Progress) -> Path:
    """Build (cached, a build said to ``progress``) the host library of ``package_dir`` for
    ``QnnOp=ns::op`` bindings, after importing the modules that register the ops."""
    from ..runtime import build_host_library
    from ..torch_bridge import bind
    from ..torch_bridge.binding import MissingOutVariantWarning

    for module in modules:
        import_user_module(module, f"--import {module}")
    package = load_configs([str(c) for c in package_configs(package_dir)])
    mapping = {}
    for item in binds:
        qnn_type, _, op = item.partition("=")
        if not qnn_type or not op:
            raise UsageError(f"--bind {item!r}: expected QnnOpType=NAMESPACE::OP[.OVERLOAD]")
        mapping[qnn_type] = torch_overload(op, f"--bind {item!r}", "(--import the module that registers it)")
    with warnings.catch_warnings():  # the build refuses a missing .out variant with the same fix
        warnings.simplefilter("ignore", MissingOutVariantWarning)
        binding = bind(package, mapping)
    return build_host_library(package_dir, binding, progress=progress)
