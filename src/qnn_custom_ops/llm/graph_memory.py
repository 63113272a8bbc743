"""What an export's graphs cost beside the graphs alive, kept down while a model is exported and
lowered: the graphs ExecuTorch's edge passes and emitter replace, freed late
(``graphs_collected_promptly``), and the Python stack trace on every node
(``stack_traces_not_recorded``)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
from collections.abc import Iterator

import torch.fx


def _heap_trimmed() -> None:
    """glibc's free heap pages given back to the system (``malloc_trim``); nothing to do without glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@contextlib.contextmanager
def graphs_collected_promptly() -> Iterator[None]:
    """Within the block, the objects alive when it starts (the imported modules, the converted
    programs) are left out of Python's collections (``gc.freeze``); what calibration and conversion
    left is collected first and its heap pages given back; everything is collected as before after.

    ExecuTorch's edge passes and emission retrace each method many times, each retrace leaving the
    graph it replaced behind, and a graph is a cycle (its nodes and it refer to each other) that
    only Python's cyclic collector frees. Its full collection waits until the objects that
    survived since the last one number a quarter of those it already holds, and an export's
    interpreter (torch, torchao, transformers and ExecuTorch imported) holds about 0.6 M before
    lowering starts: the graphs of several stages piled up before any was freed (at the end of the
    edge passes of a 0.5b-shaped Llama of 8 layers, 30,000 nodes were alive, about 11,000 of them
    garbage). Frozen, those 0.6 M are neither counted nor looked at."""
    gc.collect()
    _heap_trimmed()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def stack_traces_not_recorded() -> Iterator[None]:
    """Within the block, torch's tracers keep no Python stack trace on the nodes they make
    (``torch.fx.config.do_not_emit_stack_traces``). Each node of an exported model keeps its own
    (its source lines: about 700 bytes of text a node of a Hugging Face Llama) through every graph
    made from it, and nothing of an export reads them: ExecuTorch's emitter writes none
    (``emit_stacktrace`` off)."""
    saved = torch.fx.config.do_not_emit_stack_traces
    torch.fx.config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        torch.fx.config.do_not_emit_stack_traces = saved
