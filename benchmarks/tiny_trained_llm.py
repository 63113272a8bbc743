"""A tiny decoder that has learned something, for measuring quantization on real activations.

Trains a Qwen3-shaped model (2 layers, hidden 128, 4 query heads on 2 KV heads of 32) on the
Python standard library's own source files (every machine with Python has them), with a
byte-level BPE tokenizer of 1024 tokens trained by ``tokenizers``, for a few CPU-minutes on 2
cores, seeded. The checkpoint (config, safetensors, tokenizer) is saved in the cache directory
and reused by later runs; its held-out perplexity is printed.

    .venv/bin/python -m benchmarks.tiny_trained_llm [--steps 400] [--retrain]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import sysconfig
import time
from pathlib import Path

os.environ.setdefault("QNN_SDK_ROOT", "")  # never let executorch download the SDK

SEED, VOCAB, SEQ, BATCH = 0, 1024, 96, 12
ARCHITECTURE = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=32, max_position_embeddings=512, tie_word_embeddings=True)
#: Text kept out of training: the last files of the sorted list.
HELD_OUT_FILES = 12


def corpus() -> tuple[list[str], list[str]]:
    """(training texts, held-out texts): the standard library's top-level modules, sorted."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    return texts[:-HELD_OUT_FILES], texts[-HELD_OUT_FILES:]


def checkpoint_dir(steps: int) -> Path:
    """Where the checkpoint of these settings lives: the cache directory, keyed by them."""
    root = Path(os.environ.get("QCO_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                / "qnn_custom_ops")
    key = json.dumps([ARCHITECTURE, SEED, VOCAB, SEQ, BATCH, steps, sys.version_info[:2]], sort_keys=True)
    return root / "llm-bench" / f"tiny-qwen3-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def train_tokenizer(texts: list[str], vocab: int = VOCAB):
    import tokenizers
    import transformers

    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(texts, trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>",
                                                bos_token="<|endoftext|>")


def token_stream(tokenizer, texts: list[str]):
    import torch

    ids: list[int] = []
    for text in texts:
        ids += tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    return torch.tensor(ids)


def perplexity(model, stream, windows: int = 64) -> float:
    """exp of the mean next-token loss over the first ``windows`` windows of ``SEQ`` tokens."""
    import torch

    usable = stream[: (len(stream) // SEQ) * SEQ].view(-1, SEQ)[:windows]
    with torch.no_grad():
        loss = model(usable, labels=usable).loss
    return math.exp(float(loss))


def train_model(texts: list[str], steps: int, *, architecture: dict = ARCHITECTURE, vocab: int = VOCAB,
                seq: int = SEQ, batch: int = BATCH, log=print):
    """(model in eval mode, tokenizer) trained on ``texts`` for ``steps`` seeded AdamW steps of
    ``batch`` random windows of ``seq`` tokens: the benchmark's checkpoint (400 steps, these
    defaults), and the suite's model trained for seconds (smaller, fewer steps). Deterministic
    for a given torch thread count (the sums of a matmul are split by thread)."""
    import torch
    import transformers

    torch.manual_seed(SEED)
    tokenizer = train_tokenizer(texts, vocab)
    stream = token_stream(tokenizer, texts)
    config = transformers.Qwen3Config(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                                      eos_token_id=tokenizer.eos_token_id, **architecture)
    model = transformers.Qwen3ForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    generator = torch.Generator().manual_seed(SEED)
    started = time.monotonic()
    model.train()
    for step in range(steps):
        starts = torch.randint(0, len(stream) - seq - 1, (batch,), generator=generator)
        windows = torch.stack([stream[s : s + seq] for s in starts.tolist()])
        loss = model(windows, labels=windows).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"step {step:>5}: loss {loss.item():.3f} ({time.monotonic() - started:.0f} s)")
    return model.eval(), tokenizer


def train(steps: int, out: Path) -> None:
    """The benchmark's checkpoint, saved in ``out`` with its held-out perplexity."""
    import torch

    torch.set_num_threads(2)
    started = time.monotonic()
    train_texts, held_out = corpus()
    model, tokenizer = train_model(train_texts, steps, log=lambda line: print(line, flush=True))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    held_out_ppl = perplexity(model, token_stream(tokenizer, held_out))
    (out / "trained.json").write_text(json.dumps({"held_out_perplexity": held_out_ppl, "steps": steps,
                                                  "seconds": time.monotonic() - started}))


def trained_checkpoint(steps: int = 400, retrain: bool = False) -> Path:
    """The checkpoint, trained now unless the cache has it."""
    out = checkpoint_dir(steps)
    if retrain or not (out / "trained.json").is_file():
        train(steps, out)
    return out


def load_trained(calibration_length: int):
    """What the LLM benchmarks start from: the checkpoint (trained if the cache lacks it), its
    tokenizer and model (eager attention), the held-out token stream, and 16 calibration prompts
    of ``calibration_length`` training tokens."""
    import transformers

    checkpoint = trained_checkpoint()
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, attn_implementation="eager").eval()
    train_texts, held_out = corpus()
    calibration = token_stream(tokenizer, train_texts[::7])[: 16 * calibration_length].view(16, calibration_length)
    return checkpoint, tokenizer, model, token_stream(tokenizer, held_out), calibration.tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--retrain", action="store_true")
    args = parser.parse_args()
    out = trained_checkpoint(args.steps, args.retrain)
    facts = json.loads((out / "trained.json").read_text())
    print(f"{out}: held-out perplexity {facts['held_out_perplexity']:.2f} after {facts['steps']} steps "
          f"({facts['seconds']:.0f} s of training)")


if __name__ == "__main__":
    main()
