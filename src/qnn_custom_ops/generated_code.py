"""The source of the code torch.fx generates, not kept past its compilation.

Each ``GraphModule.recompile`` keeps the Python source it generated for ever, in torch.fx's
loader (``torch.fx.graph_module._loader.eval_cache``), so that a traceback can show the lines:
an export's quantization and lowering recompile its graphs a few hundred times, and a 28-layer
model's two methods left 162 MiB of sources (measured on a 28-layer model's 16a4w export; the
same at any width), 10 % of a 3B model's program of codes. Within ``generated_sources_dropped``
each source is dropped as soon as it is compiled; a traceback through generated code then shows
its file and line without the text, which no error of ours prints.
"""

from __future__ import annotations

import contextlib
import linecache
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def generated_sources_dropped() -> Iterator[None]:
    """Within the block, torch.fx keeps no source of the code it generates once it is compiled."""
    from torch.fx import graph_module

    loader = type(graph_module._loader)
    keep = loader.cache

    def compiled_and_dropped(self: Any, src: str, globals: dict[str, Any], co_fields: Any = None) -> str:
        key = keep(self, src, globals, co_fields)
        self.eval_cache.pop(key, None)
        linecache.cache.pop(key, None)
        return key

    loader.cache = compiled_and_dropped  # type: ignore[method-assign]
    try:
        yield
    finally:
        loader.cache = keep  # type: ignore[method-assign]
