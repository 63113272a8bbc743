"""Models of the size people ship through ``llm export``: per stage time, the child's peak
resident memory, and the program's size (``model.pte`` and, for the host, the ``model.ptd`` its
weights are in), against the bytes of the weights (issue 32, item 4).

Checkpoints are Llama-3.2-shaped with random weights, made once in the cache directory
(``~/.cache/qnn_custom_ops/llm-bench/``) in the checkpoint's dtype (bf16 by default): the model
is built on the meta device for its names and shapes, and its weights are made and written a
1 GB safetensors shard at a time, with the index transformers reads (``write_shards``).

- ``0.5b``: Llama architecture at Qwen2.5-0.5B's dimensions (hidden 896, 24 layers, 14 heads on
  2 KV heads, MLP 4864, vocab 151936, tied embeddings; no q/k/v biases): 494 M parameters;
- ``1b``: Llama-3.2-1B (hidden 2048, 16 layers, 32 heads on 8, MLP 8192, vocab 128256, tied):
  1.24 B;
- ``3b`` (``--sizes 3b``): Llama-3.2-3B (hidden 3072, 28 layers, 24 heads on 8, MLP 8192,
  vocab 128256, tied): 3.21 B;
- ``8b`` (``--sizes 8b``): Llama-3.1-8B (hidden 4096, 32 layers, 32 heads on 8, MLP 14336,
  vocab 128256, untied): 8.03 B, a 16 GB bf16 checkpoint (32 GB in float32: more than this
  machine holds; a quantized export reads it a layer at a time).

Each run is ``qnn-custom-ops llm export ... --progress`` in a child process (short --prefill and
--ctx, so that the cost is the weights'); its progress lines are timestamped, its resident
memory sampled every 0.2 s (the stage at the peak is the last progress line before it) and its
peak read from ``wait4``'s rusage. A run past ``--limit-gb`` resident is killed. Weights'
bytes: each parameter once (a tied embedding once), in float32, the dtype the float host
programs keep (a bf16 checkpoint is read as float32), and the dtype the calibration computes in;
a quantized host program keeps float32 weights when they fit (``FoldQuantizedWeights``), else
their codes (``llm export`` says which). Each run's log, with its memory timeline, is
``export-SIZE-QUANT.log`` in the cache directory.

``--target qnn`` (with ``--soc``, ``--shards``) lowers to QNN instead: ``llm export`` compiles
each context with QAIRT's x86 HTP backend (``make .venv/.qairt``; no ``QNN_SDK_ROOT`` needed),
and the program's weights are in its ``.pte``; its logs and exports are named ``...-qnn``.
``llm generate`` on it runs on the x86 HTP simulator (slow: pass ``--generate-tokens 0`` for a
size).

Then ``llm generate`` runs on each export the same way (``--generate-tokens`` new tokens, 8 by
default; 0 skips it): its peak resident memory, as a multiple of the program's bytes (``.pte`` +
``.ptd``), is what running the program costs (issue 42: at most 1.3x). ``--max-memory GB`` is
passed to both commands (the user's memory budget); ``--layers N`` makes a checkpoint of the
size's shape with N layers (``llama-SIZE-LN-DTYPE``: the issue's 2-layer 1b float export has a
1.54 GB ``.ptd``); ``--reuse`` keeps each export in the cache directory
(``export-SIZE-QUANT/``) and measures ``llm generate`` on it again without exporting. Each peak
line says how much of it was anonymous memory and how much mapped files (``RssAnon`` and
``RssFile``: a ``.ptd`` the runtime maps is the second).

    .venv/bin/python -m benchmarks.bench_llm_sizes [--sizes 0.5b,1b] [--quant none,16a4w] [--layers 2]
        [--max-memory 8] [--generate-tokens 8] [--reuse] [--target qnn [--soc SM8650] [--shards N]]
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
    "8b": (4096, 32, 32, 8, 14336, 128256),
}
#: Sizes whose ``lm_head`` is a weight of its own (the others tie it to the embedding).
UNTIED = {"8b"}
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qnn_custom_ops" / "llm-bench"
ENV = {
    **os.environ,
    "QNN_SDK_ROOT": os.environ.get("QNN_SDK_ROOT", ""),
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}


def shape(size: str, layers: int | None = None) -> tuple[int, ...]:
    """The size's dimensions, with ``layers`` layers when given."""
    hidden, default_layers, heads, kv_heads, mlp, vocab = SHAPES[size]
    return hidden, layers or default_layers, heads, kv_heads, mlp, vocab


def parameters(size: str, layers: int | None = None) -> int:
    """Each weight once (a tied embedding once)."""
    hidden, layers, heads, kv_heads, mlp, vocab = shape(size, layers)
    head_dim = hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    embeddings = 2 if size in UNTIED else 1
    return embeddings * vocab * hidden + layers * (attention + 3 * hidden * mlp + 2 * hidden) + hidden


def make_checkpoint(size: str, dtype_name: str, directory: Path, layers: int | None = None) -> None:
    """Run in a child: the checkpoint, made in ``dtype`` parameter by parameter."""
    import tokenizers
    import torch
    import transformers

    dtype = getattr(torch, dtype_name)
    hidden, layers, heads, kv_heads, mlp, vocab = shape(size, layers)
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
        tie_word_embeddings=size not in UNTIED,
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
        model = transformers.LlamaForCausalLM(config)  # names and shapes only: nothing allocated
    staging = Path(tempfile.mkdtemp(prefix=f"{directory.name}.", dir=directory.parent))
    write_shards(staging, [(name, p.shape) for name, p in model.named_parameters()], dtype)  # tied: met once
    config.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(directory)


def write_shards(directory: Path, weights: list[tuple[str, tuple]], dtype, shard_bytes: int = 2**30) -> None:
    """Random weights (0.02 x normal; norms 1) written a shard of ``shard_bytes`` at a time with
    the index transformers reads: the whole model is never held (an 8B one is 16 GB in bf16)."""
    import json

    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(0)
    shards: list[dict] = [{}]
    for name, shape in weights:
        if shards[-1] and sum(t.nbytes for t in shards[-1].values()) >= shard_bytes:
            shards.append({})
            save_file(shards[-2], directory / f"part-{len(shards) - 1}.safetensors", metadata={"format": "pt"})
            shards[-2] = dict.fromkeys(shards[-2])
        if "norm" in name:
            shards[-1][name] = torch.ones(shape, dtype=dtype)
        else:
            shards[-1][name] = torch.randn(shape, generator=generator, dtype=dtype).mul_(0.02)
    save_file(shards[-1], directory / f"part-{len(shards)}.safetensors", metadata={"format": "pt"})
    weight_map = {name: f"part-{i}.safetensors" for i, shard in enumerate(shards, 1) for name in shard}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def resident(pid: int) -> tuple[int, int, int] | None:
    """(VmRSS, RssAnon, RssFile) of ``pid`` in bytes, or None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        return tuple(int(re.search(rf"{key}:\s+(\d+)", status)[1]) * 1024 for key in ("VmRSS", "RssAnon", "RssFile"))
    except (OSError, TypeError):
        return None


class Sampler(threading.Thread):
    """Resident memory of a child every 0.2 s; the stage (last progress line) at its peak, and how
    much of the peak was anonymous memory and mapped files; kills the child past ``limit`` bytes."""

    def __init__(self, pid: int, limit: int):
        super().__init__(daemon=True)
        self.pid, self.limit = pid, limit
        self.stage, self.peak, self.peak_stage, self.killed = "start", 0, "start", False
        self.peak_anon = self.peak_file = 0
        self.done = threading.Event()
        self.timeline: list[tuple[float, int, str]] = []  # (seconds, resident bytes, stage), every 2 s

    def run(self) -> None:
        while not self.done.wait(0.2):
            sample = resident(self.pid)
            if sample is None:
                continue
            rss, anon, mapped = sample
            now = time.monotonic()
            if not self.timeline or now - self.timeline[-1][0] >= 2:
                self.timeline.append((now, rss, self.stage))
            if rss > self.peak:
                self.peak, self.peak_stage = rss, self.stage
                self.peak_anon, self.peak_file = anon, mapped
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
        "peak_anon": sampler.peak_anon,
        "peak_file": sampler.peak_file,
        "killed": sampler.killed,
    }


def stage_seconds(lines: list[tuple[float, str]]) -> dict[str, float]:
    """The stage times the progress lines report."""
    found = {}
    for _, line in lines:
        for key, pattern in (
            ("load", r"^(?:loaded|read) .* in ([\d.]+) s"),
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


PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"


def budget_flags(max_memory: float | None) -> list[str]:
    """``--max-memory GB`` for both commands, when the bench was given one."""
    return [] if max_memory is None else ["--max-memory", f"{max_memory:g}"]


def target_flags(args: argparse.Namespace) -> list[str]:
    """``--target qnn --soc SOC [--shards N]`` when the bench lowers to QNN; nothing for the host."""
    if args.target == "host":
        return []
    return ["--target", "qnn", "--soc", args.soc, *(["--shards", str(args.shards)] if args.shards else [])]


def ensure_checkpoint(size: str, layers: int | None, dtype: str, limit: int) -> Path:
    """The cached checkpoint of ``size`` (with ``layers`` layers), made first when missing."""
    name = f"{size}-L{layers}" if layers else size
    checkpoint = CACHE / f"llama-{name}-{dtype}"
    if (checkpoint / "config.json").is_file():
        return checkpoint
    argv = [sys.executable, __file__, "--make-checkpoint", size, dtype, str(checkpoint)]
    made = run_child([*argv, *(["--layers", str(layers)] if layers else [])], limit, CACHE / f"make-{name}.log")
    print(f"{name}: checkpoint made in {made['seconds']:.0f} s, peak {made['peak'] / 2**30:.2f} GiB", flush=True)
    if made["status"] != 0:
        sys.exit(f"{name}: making the checkpoint failed; see {CACHE / f'make-{name}.log'}")
    return checkpoint


def verdict(run: dict, log: Path) -> str:
    if run["status"] == 0:
        return "ok"
    return "KILLED past limit" if run["killed"] else f"exit {run['status']}, see {log}"


def peak_text(run: dict) -> str:
    """The peak, and how much of it was anonymous memory and mapped files."""
    return (
        f"peak RSS {run['peak'] / 2**30:.2f} GiB (anonymous {run['peak_anon'] / 2**30:.2f}, "
        f"files {run['peak_file'] / 2**30:.2f}) at: {run['peak_stage']!r}"
    )


def export_run(checkpoint: Path, out: Path, quant: str, args: argparse.Namespace, limit: int, log: Path) -> dict:
    """``llm export`` of ``checkpoint`` at ``quant`` into ``out``, measured."""
    command = [sys.executable, "-m", "qnn_custom_ops", "llm", "export", str(checkpoint), "-o", str(out)]
    options = ["--prefill", str(args.prefill), "--ctx", str(args.ctx), "--quant", quant, "--progress"]
    return run_child([*command, *options, *target_flags(args), *budget_flags(args.max_memory)], limit, log)


def generate_run(out: Path, args: argparse.Namespace, limit: int, log: Path) -> dict:
    """``llm generate`` on the export in ``out``, measured."""
    command = [sys.executable, "-m", "qnn_custom_ops", "llm", "generate", str(out), "--prompt", PROMPT]
    options = ["--max-new-tokens", str(args.generate_tokens), "--progress", *budget_flags(args.max_memory)]
    return run_child([*command, *options], limit, log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0.5b,1b", help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--quant", default="none", help="comma-separated: none,16a4w,...")
    parser.add_argument("--dtype", default="bfloat16", help="the checkpoint's dtype")
    parser.add_argument("--layers", type=int, help="layers of the checkpoint (default: the size's own)")
    parser.add_argument("--prefill", type=int, default=32)
    parser.add_argument("--ctx", type=int, default=128)
    parser.add_argument("--target", choices=("host", "qnn"), default="host", help="llm export's --target")
    parser.add_argument("--soc", default="SM8650", help="--target qnn: the SoC QNN compiles for")
    parser.add_argument("--shards", type=int, help="--target qnn: llm export's --shards (default: its own)")
    parser.add_argument("--limit-gb", type=float, default=20.0, help="kill a run past this resident memory")
    parser.add_argument("--max-memory", type=float, metavar="GB", help="llm export's and generate's --max-memory")
    parser.add_argument("--generate-tokens", type=int, default=8, help="llm generate's new tokens (0: no generate)")
    parser.add_argument("--keep", action="store_true", help="keep the export directories")
    parser.add_argument("--reuse", action="store_true", help="exports kept in the cache and reused when there")
    parser.add_argument("--make-checkpoint", nargs=3, metavar=("SIZE", "DTYPE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make_checkpoint:
        size, dtype, directory = args.make_checkpoint
        make_checkpoint(size, dtype, Path(directory), args.layers)
        return
    limit = int(args.limit_gb * 2**30)
    CACHE.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in args.sizes.split(","):
        checkpoint = ensure_checkpoint(size, args.layers, args.dtype, limit)
        name = checkpoint.name.removeprefix("llama-").removesuffix(f"-{args.dtype}")
        weights = parameters(size, args.layers) * 4
        for quant in args.quant.split(","):
            run_name = f"{name}-{quant}" + ("-qnn" if args.target == "qnn" else "")
            out = CACHE / f"export-{run_name}"
            log = CACHE / f"export-{run_name}.log"
            if args.reuse and (out / "manifest.json").is_file():
                run, stages = None, {}
                print(f"{name} {quant}: export reused from {out}", flush=True)
            else:
                if not args.reuse:
                    out = Path(tempfile.mkdtemp(prefix=f"bench-{name}-{quant}-", dir=CACHE))
                run = export_run(checkpoint, out, quant, args, limit, log)
                stages = stage_seconds(run["lines"])
                print(
                    f"{name} {quant}: {verdict(run, log)}; total {run['seconds']:.0f} s; "
                    + ", ".join(f"{k} {v:.0f} s" for k, v in stages.items())
                    + f"; {peak_text(run)}; = {run['peak'] / weights:.2f}x the float32 weights "
                    f"({weights / 2**30:.2f} GiB)",
                    flush=True,
                )
            size_bytes = program_bytes(out)
            generated = None
            if size_bytes is not None and args.generate_tokens > 0:
                generate_log = CACHE / f"generate-{run_name}.log"
                generated = generate_run(out, args, limit, generate_log)
                print(
                    f"{name} {quant} generate: {verdict(generated, generate_log)}; {generated['seconds']:.0f} s; "
                    f"{peak_text(generated)}",
                    flush=True,
                )
            if size_bytes is not None:
                print(
                    f"{name} {quant}: .pte + .ptd {size_bytes / 2**30:.2f} GiB = {size_bytes / weights:.2f}x the "
                    f"weights, {size_bytes / parameters(size, args.layers):.2f} bytes a parameter; "
                    "peak / program bytes: "
                    + ("-" if run is None else f"export {run['peak'] / size_bytes:.2f}x")
                    + ("" if generated is None else f", generate {generated['peak'] / size_bytes:.2f}x"),
                    flush=True,
                )
            rows.append((name, quant, run, stages, weights, size_bytes, generated))
            if not (args.keep or args.reuse):
                subprocess.run(["rm", "-rf", str(out)], check=False)
    print_table(rows, args.layers)


def print_table(rows: list[tuple], layers: int | None) -> None:
    """The Markdown table of every run: export stages and peak, program bytes, generate's peak."""
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
        "B / param",
        "export peak / program",
        "generate peak",
        "generate peak / program",
    )
    print("\n| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for name, quant, run, stages, weights, size_bytes, generated in rows:
        cells = [f"{stages[k]:.0f} s" if k in stages else "-" for k in ("load", "export", "quantize", "lower")]
        size = name.split("-")[0]
        export_cells = (
            ["-", "-", "-"]
            if run is None
            else [f"{run['seconds']:.0f} s", f"{run['peak'] / 2**30:.1f} GiB", f"{run['peak'] / weights:.2f}"]
        )
        count = parameters(name.split("-")[0], layers)
        program = (
            ["-", "-", "-"]
            if size_bytes is None
            else [f"{size_bytes / 2**30:.2f} GiB", f"{size_bytes / weights:.2f}", f"{size_bytes / count:.2f}"]
        )
        ratio = "-" if run is None or size_bytes is None else f"{run['peak'] / size_bytes:.2f}"
        generate_cells = (
            ["-", "-"]
            if generated is None or size_bytes is None
            else [f"{generated['peak'] / 2**30:.2f} GiB", f"{generated['peak'] / size_bytes:.2f}"]
        )
        failed = [verdict(r, Path("the log")) for r in (run, generated) if r is not None and r["status"] != 0]
        print(
            f"| {name} ({parameters(size, layers) / 1e9:.2f} B) | {quant} | {' | '.join(cells)} | "
            + " | ".join([*export_cells, *program, ratio, *generate_cells])
            + " |"
            + "".join(f" {f}" for f in failed)
        )


if __name__ == "__main__":
    main()
