"""A module that registers torch ops, imported by the opdef-from-torch CLI test."""

import torch

LIBRARY = torch.library.Library("qco_sample", "DEF")
LIBRARY.define("gated(Tensor x, Tensor gate, float beta=1.0, int[] dims=[-1]) -> Tensor")
