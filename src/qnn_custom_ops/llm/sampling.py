"""How ``llm generate`` picks each token from the logits: greedy (the argmax, what
``qnn_llama_runner --temperature 0`` does, the default), or sampled at a temperature from the
smallest set of tokens whose probability reaches ``top_p`` (nucleus sampling), with a seed.

A sampled run is reproducible here (the same seed gives the same tokens), not the phone's: the
runner draws from its own random number generator, so only greedy generation matches it token
for token. Imports torch only to choose (``llm generate`` checks its options before loading it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    import torch


class SamplingError(UsageError):
    """A temperature, top-p or seed that cannot be used."""


@dataclass(frozen=True)
class Sampling:
    """``temperature`` 0 is greedy (then ``top_p`` and ``seed`` must be left at their defaults,
    which nothing would read); above 0, softmax(logits / temperature) cut to the nucleus
    ``top_p``, drawn with a generator seeded with ``seed`` at the start of each generation."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise SamplingError(f"--temperature {self.temperature}: give 0 (greedy) or a number above 0")
        if not 0 < self.top_p <= 1 or not math.isfinite(self.top_p):
            raise SamplingError(f"--top-p {self.top_p}: give a probability above 0, at most 1")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise SamplingError(f"--seed {self.seed}: give a whole number from 0 to 2**63 - 1")
        if self.greedy and (self.top_p != 1 or self.seed is not None):
            given = "--top-p" if self.top_p != 1 else "--seed"
            raise SamplingError(
                f"{given} applies to sampling, and --temperature is 0 (greedy: the argmax, nothing drawn); "
                "give --temperature above 0 too, or leave it out"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def chooser(self) -> TokenChooser:
        """A fresh chooser for one generation (its generator seeded anew)."""
        return TokenChooser(self)


class TokenChooser:
    """Picks tokens for one generation: ``choose(logits)`` with the logits as reals ``[vocab]``."""

    def __init__(self, sampling: Sampling) -> None:
        import torch

        self.sampling = sampling
        self.generator = torch.Generator()
        self.generator.manual_seed(0 if sampling.seed is None else sampling.seed)

    def __call__(self, logits: torch.Tensor) -> int:
        import torch

        if self.sampling.greedy:
            return int(logits.double().argmax())
        probabilities = torch.softmax(logits.double() / self.sampling.temperature, dim=-1)
        ordered, order = probabilities.sort(descending=True)
        before = ordered.cumsum(0) - ordered  # the probability of the tokens ranked above each
        ordered[before >= self.sampling.top_p] = 0  # the nucleus: up to the first reaching top_p
        drawn = torch.multinomial(ordered, 1, generator=self.generator)
        return int(order[drawn])
