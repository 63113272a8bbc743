"""The memory an ``llm`` command may use: the user's (``--max-memory GB``), else what is free.

"Free" is the kernel's ``MemAvailable`` when the command starts (memory a new process can take
without swapping: free pages and the page cache that can be dropped), not the machine's
physical memory: on a machine where other work holds 16 of 24 GB, a decision against 24 GB
would have a lowering swap or be killed. A budget decides what an export keeps (float32 weights
folded, or codes: ``fold_fits``) and refuses a run that cannot fit before it loads
(``check_run_fits``). Imports nothing heavy: the CLI checks ``--max-memory`` before torch.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..progress import Progress

GIB = 2**30

#: A folded quantized host lowering's peak memory over its float32 weights' bytes, rounded up
#: from what ``bench_llm_sizes.py`` measured (4.8 at 0.5b, 4.2 at 1b): both methods' folds, the
#: codes, and the emitter's copy of every program constant into bytes.
FOLDED_PEAK_FACTOR = 5

#: What ``llm generate`` holds before the program (the interpreter with torch, executorch and the
#: tokenizer), rounded up from ``bench_llm_sizes.py``'s generate runs (0.39-0.42 GiB).
INTERPRETER_BYTES = GIB // 2


class MemoryBudgetError(UsageError):
    """A run that would not fit in the memory budget; the message says what it needs."""


def available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int:
    """``MemAvailable`` (bytes), or the physical memory where the kernel does not say it."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def parse_gib(text: str) -> float:
    """``--max-memory``'s value: a number of GiB above 0 (``ValueError`` naming it otherwise)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r} is not a number of GiB above 0 (e.g. 8 or 7.5)")
    return value


@dataclass(frozen=True)
class MemoryBudget:
    """Bytes a command may hold at its peak, and whether the user gave them."""

    bytes: int
    given: bool

    @staticmethod
    def of(max_memory: float | None) -> MemoryBudget:
        """``--max-memory`` (GiB), or what is free now."""
        if max_memory is None:
            return MemoryBudget(available_bytes(), given=False)
        return MemoryBudget(int(parse_gib(str(max_memory)) * GIB), given=True)

    def __str__(self) -> str:
        amount = f"{self.bytes / GIB:.3g} GiB"
        return f"--max-memory {amount}" if self.given else f"the {amount} free (MemAvailable; --max-memory sets it)"


def fold_fits(float32_bytes: int, budget: MemoryBudget, progress: Progress) -> bool:
    """Whether a quantized host program gets its weights (``float32_bytes`` once folded) folded
    into float32 (faster generation on the host, the same results): when the lowering's peak,
    ``FOLDED_PEAK_FACTOR`` times them, and the program's run fit the budget. Said either way."""
    if FOLDED_PEAK_FACTOR * float32_bytes <= budget.bytes:
        progress(f"host program: weights dequantized once, when lowered ({float32_bytes / GIB:.2f} GiB in float32)")
        return True
    progress(
        f"host program: weights kept as codes, dequantized on every call (slower, the same results): "
        f"folding them, {float32_bytes / GIB:.2f} GiB in float32, would peak near {FOLDED_PEAK_FACTOR}x that, "
        f"past {budget}"
    )
    return False


def run_bytes(pte: bytes, data: Path | None) -> int:
    """The least running a host program holds at its peak: its files (the weights, once: packed by
    XNNPACK or mapped from the data file), its planned buffers (host-only methods of one loaded
    program share them: the largest method's), and the interpreter. Measured peaks are above it
    (``bench_llm_sizes.py``, Llama-3.2-1B's widths): a float program by ``lm_head``'s unpacked
    source while XNNPACK packs it (1.17x at 16 layers), a program of codes by its second method's
    mapping of the data file, which resident memory counts again (1.31x at 2 layers)."""
    from ..runtime.loading import program_facts

    planned = max(program_facts(pte).planned_bytes.values(), default=0)
    files = len(pte) + (data.stat().st_size if data is not None else 0)
    return files + planned + INTERPRETER_BYTES


def check_run_fits(pte: bytes, data: Path | None, budget: MemoryBudget, where: str) -> None:
    """Refuse, in one line, a run of the host program in ``where`` that would not fit the budget."""
    needed = run_bytes(pte, data)
    if needed > budget.bytes:
        raise MemoryBudgetError(
            f"{where}: running it takes at least {needed / GIB:.3g} GiB (its files, planned buffers and the "
            f"interpreter), more than {budget}; give a larger --max-memory, or export with --quant to hold codes"
        )
