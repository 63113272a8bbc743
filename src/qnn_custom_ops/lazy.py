"""Package attributes imported on first use (PEP 562): a light command (validate, generate,
calling a kernel) never pays for torch and executorch it does not use."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_getattr(package: str, sources: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each public name in ``sources`` is imported
    from its submodule (``name -> submodule``) the first time it is asked for, then kept."""

    def __getattr__(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f".{sources[name]}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
