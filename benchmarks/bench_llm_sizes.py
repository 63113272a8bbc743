"""Models of the size people ship through ``llm export``: per stage time, the child's peak
resident memory, and the program's size (``model.pte`` and, for the host, the ``model.ptd`` its
weights are in), against the bytes of the weights (issue 32, item 4).

Checkpoints are Llama-3.2-shaped with random weights, made once in the cache directory
(``~/.cache/qnn_custom_ops/llm-bench/``) in the checkpoint's dtype (bf16 by default): the model
is built on the meta device, materialized empty in that dtype and filled parameter by
parameter (no float32 copy of the whole model), then written with ``save_pretrained``.

- ``0.5b``: Llama architecture at Qwen2.5-0.5B's dimensions (hidden 896, 24 layers, 14 heads on
  2 KV heads, MLP 4864, vocab 151936, tied embeddings; no q/k/v biases): 494 M parameters;
- ``1b``: Llama-3.2-1B (hidden 2048, 16 layers, 32 heads on 8, MLP 8192, vocab 128256, tied):
  1.24 B;
- ``3b`` (``--sizes 3b``): Llama-3.2-3B (hidden 3072, 28 layers, 24 heads on 8, MLP 8192,
  vocab 128256, tied): 3.21 B.

Each run is ``qnn-custom-ops llm export ... --progress`` in a child process (short --prefill and
--ctx, so that the cost is the weights'); its progress lines are timestamped, its resident
memory sampled every 0.2 s (the stage at the peak is the last progress line before it) and its
peak read from ``wait4``'s rusage. A run past ``--limit-gb`` resident is killed. Weights'
bytes: each parameter once (a tied embedding once), in float32, the dtype the float host
programs keep (a bf16 checkpoint is read as float32), and the dtype the calibration computes in;
a quantized host program keeps float32 weights when they fit (``FoldQuantizedWeights``), else
their codes (``llm export`` says which). Each run's log, with its memory timeline, is
``export-SIZE-QUANT.log`` in the cache directory.

    .venv/bin/python benchmarks/bench_llm_sizes.py [--sizes 0.5b,1b] [--quant none,16a4w]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SHAPES = {
    # hidden, layers, heads, kv_heads, mlp, vocab
    "0.5b": (896, 24, 14, 2, 4864, 151936),
    "1b": (2048, 16, 32, 8, 8192, 128256),
    "3b": (3072, 28, 24, 8, 8192, 128256),
}
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qnn_custom_ops" / "llm-bench"
ENV = {
    **os.environ,
    "QNN_SDK_ROOT": os.environ.get("QNN_SDK_ROOT", ""),
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}


def parameters(size: str) -> int:
    """Each weight once (the tied embedding once)."""
    hidden, layers, heads, kv_heads, mlp, vocab = SHAPES[size]
    head_dim = hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    return vocab * hidden + layers * (attention + 3 * hidden * mlp + 2 * hidden) + hidden


def make_checkpoint(size: str, dtype_name: str, directory: Path) -> None:
    """Run in a child: the checkpoint, made in ``dtype`` parameter by parameter."""
    import tokenizers
    import torch
    import transformers

    dtype = getattr(torch, dtype_name)
    hidden, layers, heads, kv_heads, mlp, vocab = SHAPES[size]
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator([__doc__], trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>"
    )
    config = transformers.LlamaConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=mlp,
        vocab_size=vocab,
        tie_word_embeddings=True,
        max_position_embeddings=131072,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        torch_dtype=dtype_name,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
        },
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    model = model.to_empty(device="cpu").to(dtype)  # empty, in the checkpoint's dtype
    model.tie_weights()  # to_empty made the tied embedding two tensors: one again
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied: the embedding is met once
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=dtype).mul_(0.02))
    staging = Path(tempfile.mkdtemp(prefix=f"{directory.name}.", dir=directory.parent))
    model.save_pretrained(staging, max_shard_size="1GB")
    tokenizer.save_pretrained(staging)
    staging.rename(directory)


class Sampler(threading.Thread):
    """Resident memory of a child every 0.2 s; the stage (last progress line) at its peak; kills
    the child past ``limit`` bytes."""

    def __init__(self, pid: int, limit: int):
        super().__init__(daemon=True)
        self.pid, self.limit = pid, limit
        self.stage, self.peak, self.peak_stage, self.killed = "start", 0, "start", False
        self.done = threading.Event()
        self.timeline: list[tuple[float, int, str]] = []  # (seconds, resident bytes, stage), every 2 s

    def run(self) -> None:
        while not self.done.wait(0.2):
            try:
                rss = int(re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{self.pid}/status").read_text())[1]) * 1024
            except (OSError, TypeError):
                continue
            now = time.monotonic()
            if not self.timeline or now - self.timeline[-1][0] >= 2:
                self.timeline.append((now, rss, self.stage))
            if rss > self.peak:
                self.peak, self.peak_stage = rss, self.stage
            if rss > self.limit and not self.killed:
                self.killed = True
                os.kill(self.pid, signal.SIGKILL)


def run_child(argv: list[str], limit: int, log: Path) -> dict:
    """Run ``argv``; its progress lines with their times, its peak resident memory (rusage and
    sampled) and the stage at the peak."""
    started = time.monotonic()
    with log.open("w") as out:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
        sampler = Sampler(child.pid, limit)
        sampler.start()
        lines = []
        for line in child.stdout:
            stamp = time.monotonic() - started
            lines.append((stamp, line.rstrip()))
            out.write(f"{stamp:8.1f} {line}")
            out.flush()
            sampler.stage = line.strip()[:70]
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        sampler.done.set()
        sampler.join()
        out.write("resident memory (s, GiB, stage):\n")
        for stamp, rss, stage in sampler.timeline:
            out.write(f"{stamp - started:8.1f} {rss / 2**30:6.2f} {stage}\n")
    return {
        "seconds": time.monotonic() - started,
        "lines": lines,
        "status": child.returncode,
        "maxrss": usage.ru_maxrss * 1024,
        "peak": max(sampler.peak, usage.ru_maxrss * 1024),
        "peak_stage": sampler.peak_stage,
        "killed": sampler.killed,
    }


def stage_seconds(lines: list[tuple[float, str]]) -> dict[str, float]:
    """The stage times the progress lines report."""
    found = {}
    for _, line in lines:
        for key, pattern in (
            ("load", r"^loaded .* in ([\d.]+) s"),
            ("export", r"^exported .* in ([\d.]+) s"),
            ("quantize", r"^quantized .* in ([\d.]+) s"),
            ("lower", r"^lowered in ([\d.]+) s"),
        ):
            match = re.search(pattern, line.strip().split("] ", 1)[-1])
            if match:
                found[key] = float(match[1])
    return found


def program_bytes(out: Path) -> int | None:
    """The program's bytes: its ``.pte`` and the data file beside it (a host export's weights),
    or None when the export wrote none."""
    files = [out / "model.pte", out / "model.ptd"]
    return sum(f.stat().st_size for f in files if f.is_file()) if files[0].is_file() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0.5b,1b", help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--quant", default="none", help="comma-separated: none,16a4w,...")
    parser.add_argument("--dtype", default="bfloat16", help="the checkpoint's dtype")
    parser.add_argument("--prefill", type=int, default=32)
    parser.add_argument("--ctx", type=int, default=128)
    parser.add_argument("--limit-gb", type=float, default=20.0, help="kill a run past this resident memory")
    parser.add_argument("--keep", action="store_true", help="keep the export directories")
    parser.add_argument("--make-checkpoint", nargs=3, metavar=("SIZE", "DTYPE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make_checkpoint:
        size, dtype, directory = args.make_checkpoint
        make_checkpoint(size, dtype, Path(directory))
        return
    limit = int(args.limit_gb * 2**30)
    CACHE.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in args.sizes.split(","):
        checkpoint = CACHE / f"llama-{size}-{args.dtype}"
        if not (checkpoint / "config.json").is_file():
            made = run_child(
                [sys.executable, __file__, "--make-checkpoint", size, args.dtype, str(checkpoint)],
                limit,
                CACHE / f"make-{size}.log",
            )
            print(
                f"{size}: checkpoint made in {made['seconds']:.0f} s, peak {made['peak'] / 2**30:.2f} GiB", flush=True
            )
            if made["status"] != 0:
                sys.exit(f"{size}: making the checkpoint failed; see {CACHE / f'make-{size}.log'}")
        weights = parameters(size) * 4
        for quant in args.quant.split(","):
            out = Path(tempfile.mkdtemp(prefix=f"bench-{size}-{quant}-", dir=CACHE))
            log = CACHE / f"export-{size}-{quant}.log"
            run = run_child(
                [
                    sys.executable,
                    "-m",
                    "qnn_custom_ops",
                    "llm",
                    "export",
                    str(checkpoint),
                    "-o",
                    str(out),
                    "--prefill",
                    str(args.prefill),
                    "--ctx",
                    str(args.ctx),
                    "--quant",
                    quant,
                    "--progress",
                ],
                limit,
                log,
            )
            size_bytes = program_bytes(out)
            stages = stage_seconds(run["lines"])
            verdict = (
                "ok"
                if run["status"] == 0
                else ("KILLED past limit" if run["killed"] else f"exit {run['status']}, see {log}")
            )
            rows.append((size, quant, run, stages, weights, size_bytes, verdict))
            print(
                f"{size} {quant}: {verdict}; total {run['seconds']:.0f} s; "
                + ", ".join(f"{k} {v:.0f} s" for k, v in stages.items())
                + f"; peak RSS {run['peak'] / 2**30:.2f} GiB = {run['peak'] / weights:.2f}x the float32 weights "
                f"({weights / 2**30:.2f} GiB), at: {run['peak_stage']!r}"
                + (
                    ""
                    if size_bytes is None
                    else f"; .pte + .ptd {size_bytes / 2**30:.2f} GiB = {size_bytes / weights:.2f}x the weights"
                ),
                flush=True,
            )
            if not args.keep:
                subprocess.run(["rm", "-rf", str(out)], check=False)
    header = (
        "model",
        "quant",
        "load",
        "export",
        "quantize",
        "lower",
        "total",
        "peak RSS",
        "peak / weights",
        ".pte + .ptd",
        "/ weights",
    )
    print("\n| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for size, quant, run, stages, weights, size_bytes, verdict in rows:
        cells = [f"{stages[k]:.0f} s" if k in stages else "-" for k in ("load", "export", "quantize", "lower")]
        pte = "-" if size_bytes is None else f"{size_bytes / 2**30:.2f} GiB"
        ratio = "-" if size_bytes is None else f"{size_bytes / weights:.2f}"
        print(
            f"| {size} ({parameters(size) / 1e9:.2f} B) | {quant} | {' | '.join(cells)} | {run['seconds']:.0f} s"
            f" | {run['peak'] / 2**30:.1f} GiB | {run['peak'] / weights:.2f} | {pte} | {ratio} |"
            + ("" if verdict == "ok" else f" {verdict}")
        )


if __name__ == "__main__":
    main()
