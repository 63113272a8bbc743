"""ExecuTorch's device runner, ``qnn_llama_runner``, as a host loop written from its source
(``examples/qualcomm/oss_scripts/llama/runner/`` of the ExecuTorch repository), driving the
``prefill_forward`` and ``kv_forward`` methods of ``cache="runner"`` programs.

- The KV manager (``kv_manager.cpp``) keeps the "smart mask": cache column ``j`` holds position
  ``j``, and a call's last ``ar`` mask columns are its own new rows. ``init_attention_mask``:
  row ``i`` sees ``[0, n_past)`` and new columns up to its own; ``update_attention_mask`` opens
  ``[n_past, n_past + n)`` for every row; the window mask (Gemma 2/3) also hides, per row, the
  columns a sliding window has left. ``update_cache`` copies the first ``n`` new rows to
  columns ``n_past...``, as codes: nothing is requantized.
- The prompt processor (``prompt_processor.cpp``) runs the prompt in chunks of ``ar`` tokens at
  positions ``start + k * ar + i`` (padding rows keep the previous chunk's tokens), writes the
  last chunk's ``1 + (N - 1) % ar`` valid rows, and takes the first token from row
  ``(N - 1) % ar`` of the last chunk's logits.
- The token generator (``token_generator.cpp``) calls ``kv_forward`` once per token and takes the
  argmax of the logits as they come (codes on a quantized program: the runner never
  dequantizes them).

With ``encodings`` the loop holds the caches, masks and logits as codes, as the runner does on
a quantized program, and hands the host program their values under each input's encoding; its
outputs become codes under each output's. Without, it works on reals (a float program, or a
quantized one's real values).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

import torch

from ..torch_bridge.quantized import (
    Encoding,
    dequantize_codes,
    encoding_of,
    is_dequantize,
    is_quantize,
    quantize_codes,
    storage_dtype,
)
from .families import LlmExportError
from .shapes import LlmShape
from .static_model import MASK_DEPTH
from .steps import Generation, Step, snapshot, token_ids

#: Float mask values: 0 where a row attends, -MASK_DEPTH elsewhere. The runner's float fill
#: writes -65535, which computes the same (both underflow to 0 in the softmax); -255 is what
#: calibration must see (ExecuTorch's static llama calibrates on it), for the mask's 16-bit
#: encoding is then the one the runner's codes assume: 65535 -> 0, 0 -> -255.
FLOAT_ATTEND, FLOAT_MASKED = 0.0, -MASK_DEPTH


@dataclass(frozen=True)
class LoggedCall:
    """One call the loop made, as calibration a layer at a time replays it (``layer_stages``):
    its method (0 prefill, 1 decode), its inputs but the caches, where its new rows went
    (``write_rows``), and whether the caches were cleared before it."""

    phase: int
    inputs: tuple
    n_past: int
    count: int
    fresh: bool


def write_rows(
    k: torch.Tensor, v: torch.Tensor, new_k: torch.Tensor, new_v: torch.Tensor, n_past: int, count: int
) -> None:
    """``update_cache`` for one layer: the first ``count`` new K columns and V rows copied to
    positions ``n_past...``, as they are."""
    k[..., n_past : n_past + count] = new_k[..., :count]
    v[:, :, n_past : n_past + count] = new_v[:, :, :count]


@dataclass(frozen=True)
class MethodEncodings:
    """A quantized method's input and output encodings, in the program's order (None: not quantized)."""

    inputs: tuple[Encoding | None, ...]
    outputs: tuple[Encoding | None, ...]


def method_encodings(module: torch.fx.GraphModule) -> MethodEncodings:
    """The encodings of a program converted by PT2E: each input's first quantization, each
    output's last dequantization (None where there is none)."""

    def of_input(node: torch.fx.Node) -> Encoding | None:
        quantized = [u for u in node.users if is_quantize(u)]
        return encoding_of(quantized[0]) if quantized else None

    nodes = list(module.graph.nodes)
    (output,) = [n for n in nodes if n.op == "output"]
    return MethodEncodings(
        tuple(of_input(n) for n in nodes if n.op == "placeholder"),
        tuple(encoding_of(n) if is_dequantize(n) else None for n in output.args[0]),
    )


def _storage(encoding: Encoding | None) -> torch.dtype:
    """How the runner holds a tensor of this encoding: codes, or float32."""
    return storage_dtype(encoding, torch.float32) if encoding is not None else torch.float32


def _mask_values(encoding: Encoding | None) -> tuple[float, float, torch.dtype]:
    """(attend, masked, dtype) as the runner fills a mask of this encoding: the largest code
    and 0 for codes (uint16 65535/0, uint8 255/0), 0 and -65535 for float."""
    if encoding is None or not encoding.is_quantized:
        return FLOAT_ATTEND, FLOAT_MASKED, torch.float32
    return float(encoding.datatype.integer_range[1]), 0.0, _storage(encoding)


class _Masks:
    """One method's attention masks ``[1, 1, ar, ctx]``: the full one, and the window's."""

    def __init__(self, shape: LlmShape, ar: int, n_past: int, encoding: Encoding | None):
        self.ctx, self.ar = shape.ctx_len, ar
        self.windows = [None, shape.window][: shape.masks]
        self.attend, self.masked, dtype = _mask_values(encoding)
        self.tensors = [torch.full((1, 1, ar, self.ctx), self.masked, dtype=dtype) for _ in self.windows]
        for mask, window in zip(self.tensors, self.windows):
            self._init(mask[0, 0], n_past, window)

    def _init(self, mask: torch.Tensor, n_past: int, window: int | None) -> None:
        """``init_attention_mask``: row i sees ``[0, n_past)`` and new columns up to its own."""
        for i in range(self.ar):
            mask[i, :n_past] = self.attend
            mask[i, self.ctx - self.ar : self.ctx - self.ar + i + 1] = self.attend
            if window is not None and n_past + i + 1 - window > 0:
                mask[i, : n_past + i + 1 - window] = self.masked

    def update(self, n_past: int, count: int) -> None:
        """``update_attention_mask``: the columns just written are seen by every row; a window
        hides, per row, what it has left."""
        for mask, window in zip(self.tensors, self.windows):
            mask[0, 0, :, n_past : n_past + count] = self.attend
            if window is None:
                continue
            for i in range(self.ar):
                hidden = n_past + count - (window - (i + 1))
                if hidden > 0:
                    mask[0, 0, i, :hidden] = self.masked


def check_fits(shape: LlmShape, prompt: int, new_tokens: int, where: str) -> None:
    """A prompt the prefill takes (one call of ``prefill_len``; the runner's prompt processor
    chunks up to ``ctx_len - prefill_len``), and room for its new tokens: of a runner layout's
    programs, ``ctx_len - prompt`` at most, as the runner generates (``generate``)."""
    longest = shape.ctx_len - shape.prefill_len if shape.cache == "runner" else shape.prefill_len
    if not 0 < prompt <= longest:
        raise LlmExportError(
            f"{where}: a prompt of {prompt} tokens; the programs take 1 to {longest} "
            f"(prefill_len {shape.prefill_len}, ctx_len {shape.ctx_len}, cache={shape.cache!r})"
        )
    room = shape.ctx_len - prompt + (shape.cache != "runner")
    if new_tokens > room:
        raise LlmExportError(
            f"{where}: {prompt} prompt + {new_tokens} new tokens do not fit ctx_len {shape.ctx_len}: ask for at "
            f"most {room} or export a longer ctx_len"
        )


class RunnerLoop:
    """``qnn_llama_runner``'s prompt processor, token generator and KV manager over two steps:
    ``prefill`` (``prefill_forward``, ``ar = shape.prefill_len``) and ``decode`` (``kv_forward``).
    Without ``prefill`` the prompt goes through ``kv_forward`` a token at a time, as the runner's
    ``--eval_mode 0`` does (a program with the one method)."""

    def __init__(
        self,
        shape: LlmShape,
        prefill: Step | None,
        decode: Step,
        encodings: tuple[MethodEncodings, MethodEncodings] | None = None,
    ):
        if shape.cache != "runner":
            raise LlmExportError(f"RunnerLoop: programs of cache={shape.cache!r}; export them with cache='runner'")
        self.shape, self.steps, self.encodings = shape, (prefill, decode), encodings
        self.record: tuple[list[tuple], list[tuple]] | None = None
        #: Every call made while a list, with where its rows went (``LoggedCall``).
        self.log: list[LoggedCall] | None = None
        self._pending: tuple[int, tuple] | None = None
        self._fresh = True
        self.caches = shape.empty_cache()
        if encodings is not None:  # codes of the new rows' encodings, zero as the runner's buffers start
            self.caches = [c.to(_storage(e)) for c, e in zip(self.caches, encodings[1].outputs[1:])]

    def _mask_encoding(self, phase: int) -> Encoding | None:
        return None if self.encodings is None else self.encodings[phase].inputs[1]

    def _call(self, phase: int, tokens: Sequence[int], positions: Sequence[int], masks: _Masks) -> list[torch.Tensor]:
        """One call: the runner's buffers as the program's inputs, its outputs as the runner keeps them."""
        inputs = self.shape.runner_inputs(tokens, masks.tensors, positions, self.caches)
        if self.record is not None:
            self.record[phase].append(snapshot(inputs))
        if self.log is not None:
            self._pending = (phase, snapshot(inputs[: len(inputs) - len(self.caches)]))
        step = self.steps[phase]
        assert step is not None  # the prompt goes through kv_forward without a prefill step
        if self.encodings is None:
            return list(step(inputs))
        io = self.encodings[phase]
        outputs = step(tuple(dequantize_codes(t, e) for t, e in zip(inputs, io.inputs)))
        return [quantize_codes(t, e) for t, e in zip(outputs, io.outputs)]

    def _update_cache(self, outputs: Sequence[torch.Tensor], n_past: int, count: int) -> None:
        """``update_cache``: the first ``count`` new K columns and V rows, copied as they are."""
        layers = self.shape.layers
        for layer in range(layers):
            k, v = self.caches[layer], self.caches[layers + layer]
            write_rows(k, v, outputs[1 + layer], outputs[1 + layers + layer], n_past, count)
        if self.log is not None and self._pending is not None:
            self.log.append(LoggedCall(*self._pending, n_past, count, self._fresh))
        self._fresh = False

    def _clear_caches(self) -> None:
        """Zero the caches, as the runner's buffers are before a new text."""
        self.caches = [torch.zeros_like(c) for c in self.caches]
        self._fresh = True

    def _logits(self, phase: int, logits: torch.Tensor) -> torch.Tensor:
        """Logits as reals, for reports (the runner takes the argmax of the codes)."""
        if self.encodings is None:
            return logits
        return dequantize_codes(logits, self.encodings[phase].outputs[0])

    def _chunks(self, prompt: Sequence[int]) -> Iterator[tuple[int, torch.Tensor, int]]:
        """The prompt processor, a chunk at a time: after each chunk's cache update, the prompt
        positions done, the chunk's logits and the phase that computed them (``kv_forward``'s
        without a prefill step)."""
        phase = 0 if self.steps[0] is not None else 1
        ar, count = (self.shape.prefill_len, 1)[phase], len(prompt)
        masks = _Masks(self.shape, ar, 0, self._mask_encoding(phase))
        tokens = [0] * ar  # padding rows keep the previous chunk's tokens, as the runner's buffer does
        for start in range(0, count, ar):
            chunk = prompt[start : start + ar]
            tokens[: len(chunk)] = chunk
            outputs = self._call(phase, tokens, range(start, start + ar), masks)
            self._update_cache(outputs, start, len(chunk))
            masks.update(start, len(chunk))
            yield start + len(chunk), outputs[0][0, : len(chunk)], phase

    def _prefill(self, prompt: Sequence[int]) -> tuple[torch.Tensor, int]:
        """The prompt processor: the logits of every prompt position (the last one's give the
        first token), and the phase that computed them."""
        chunks = list(self._chunks(prompt))
        return torch.cat([logits for _, logits, _ in chunks]), chunks[-1][2]

    def _decode(self, tokens: Sequence[int], start: int) -> None:
        """The token generator's calls on ``tokens`` (teacher-forced) at positions ``start...``."""
        masks = _Masks(self.shape, 1, start, self._mask_encoding(1))
        for position, token in enumerate(tokens, start):
            outputs = self._call(1, [token], [position], masks)
            self._update_cache(outputs, position, 1)
            masks.update(position, 1)

    def walk(self, tokens: Sequence[int], decodes_per_chunk: int) -> None:
        """Every kind of call the runner makes within the context, on ``tokens`` (calibration's
        pass): the prompt processor over the first ``ctx_len - prefill_len`` tokens, its cache
        empty, then fuller chunk by chunk; after each chunk ``decodes_per_chunk`` ``kv_forward``
        calls on the tokens that follow (the calls of a generation from a prompt ending there,
        teacher-forced), whose rows the next chunk overwrites, as the runner's prefill writes its
        rows over whatever the cache held; after the last chunk, decode calls on the rest of
        ``tokens`` up to the runner's last position, ``ctx_len - 2``."""
        shape = self.shape
        tokens = token_ids(tokens, shape.vocab, "RunnerLoop.walk")
        check_fits(shape, min(len(tokens), shape.ctx_len - shape.prefill_len), 1, "RunnerLoop.walk")
        self._clear_caches()
        self.record = None
        prompt = tokens[: shape.ctx_len - shape.prefill_len]
        for end, _, _ in self._chunks(prompt):
            count = shape.ctx_len - 1 - end if end == len(prompt) else decodes_per_chunk
            self._decode(tokens[end : end + count], end)

    def score(self, tokens: Sequence[int], record: bool = False) -> torch.Tensor:
        """Teacher forcing: the logits ``[len(tokens), vocab]`` (reals) the prompt processor
        computes at every position of ``tokens``, each predicting the next token; ``record``
        keeps the calls' inputs in ``self.record``."""
        tokens = token_ids(tokens, self.shape.vocab, "RunnerLoop.score")
        check_fits(self.shape, len(tokens), 1, "RunnerLoop.score")
        self._clear_caches()
        self.record = ([], []) if record else None
        logits, phase = self._prefill(tokens)
        return self._logits(phase, logits)

    def generate(
        self,
        prompt: Sequence[int],
        new_tokens: int,
        eos: Collection[int] = (),
        forced: Sequence[int] | None = None,
        record: bool = False,
        on_token: Callable[[list[int]], None] | None = None,
        choose: Callable[[torch.Tensor], int] | None = None,
    ) -> Generation:
        """The runner's greedy generation (``--temperature 0``): prefill ``prompt``, then one
        ``kv_forward`` call per token until ``new_tokens`` or an ``eos`` token (the runner does
        not check the first, prefill's, token; ``token_generator.cpp:343-348``). At most
        ``ctx_len - len(prompt)`` tokens: the runner decodes while ``pos < seq_len - 1``, its
        ``--seq_len`` clamped to the context (``token_generator.cpp:274``, ``runner.cpp:401-408``),
        so its last ``kv_forward`` call is at position ``ctx_len - 2``. ``forced`` feeds those tokens instead of the
        argmax (teacher forcing); ``record`` keeps every call's inputs, for calibration;
        ``on_token`` hears the tokens so far after each one (to stream them); ``choose`` picks each
        token from the logits as reals instead of the argmax (sampling: ``llm.sampling``)."""
        shape = self.shape
        prompt = token_ids(prompt, shape.vocab, "RunnerLoop: the prompt")
        check_fits(shape, len(prompt), new_tokens, "RunnerLoop")
        self.record = ([], []) if record else None
        self._clear_caches()
        logits, phase = self._prefill(prompt)
        row = logits[-1]
        result = Generation([], [], *(self.record or ([], [])))
        masks = _Masks(shape, 1, len(prompt), self._mask_encoding(1))
        for position in range(len(prompt), len(prompt) + new_tokens):
            if forced is not None:
                token = int(forced[len(result.tokens)])
            elif choose is not None:
                token = choose(self._logits(phase, row))
            else:
                token = int(row.double().argmax())
            result.tokens.append(token)
            result.logits.append(self._logits(phase, row))
            if on_token is not None:
                on_token(result.tokens)
            if len(result.tokens) == new_tokens or (len(result.tokens) > 1 and token in eos):
                break
            outputs = self._call(1, [token], [position], masks)
            self._update_cache(outputs, position, 1)
            masks.update(position, 1)
            row, phase = outputs[0][0, 0], 1
        return result
