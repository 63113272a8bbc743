"""The cases the Hexagon check runs the LLM ops on: every declared datatype, odd widths (tails
of any vector length), each enum parameter value, and index tensors that hit padding (-1),
rows past the cache and repeated rows."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..opdef import Datatype, OpPackage
from ..runtime.cost import KernelCase
from ..runtime.dtype_cases import dtype_cases, random_tensor
from ..runtime.kernel_abi import KernelDType, KernelTensor

#: Per op: its tensors' dims. Hidden sizes 769, 5125 and 8199 (no power of two above 1 divides
#: them): every row but the first starts off a vector boundary and ends in a tail; rope's half
#: of 130 is a whole vector of pairs and a tail; its tables per sequence, with a partial rotary.
SHAPES = (
    "RmsNorm:y=3x769,x=3x769,weight=769",
    "RmsNorm:y=2x8199,x=2x8199,weight=8199",
    "FusedAddRmsNorm:y=3x769,residual_out=3x769,x=3x769,residual=3x769,weight=769",
    "SiluAndMul:y=3x769,x=3x1538",
    "SiluAndMul:y=2x5125,x=2x10250",
    "GeluAndMul:y=3x769,x=3x1538",
    "GeluAndMul:y=2x5125,x=2x10250",
    "Rope:y=1x2x5x64,x=1x2x5x64,cos=5x32,sin=5x32",
    "Rope:y=1x2x3x260,x=1x2x3x260,cos=3x130,sin=3x130",
    "Rope:y=2x2x3x80,x=2x2x3x80,cos=2x3x24,sin=2x3x24",  # per sequence, 48 of 80 rotate
    # two rows of 64 per vector: per-sequence tables of 4 positions, and one position over 3 heads (a tail)
    "Rope:y=2x2x4x64,x=2x2x4x64,cos=2x4x32,sin=2x4x32",
    "Rope:y=1x3x1x64,x=1x3x1x64,cos=1x32,sin=1x32",
    "CtxScatter:out=1x2x16x8,cache=1x2x16x8,position_ids=1x5,updates=1x2x5x8",
    "CtxGather:out=1x2x5x8,cache=1x2x16x8,ctx_indices=1x5",
    "CtxScatterCb:out=2x2x16x8,cache=2x2x16x8,batch_index=2,position_ids=2x3,updates=2x2x3x8",
    "CtxGatherCb:out=2x2x3x8,cache=2x2x16x8,batch_index=2,ctx_indices=2x3",
    # QEfficient's shapes: batch_index [batch, 1], ctx_indices [batch, 1, n]
    "CtxScatterCb:out=2x2x16x8,cache=2x2x16x8,batch_index=2x1,position_ids=2x3,updates=2x2x3x8",
    "CtxGatherCb:out=2x2x16x8,cache=2x2x16x8,batch_index=2x1,ctx_indices=2x1x16",
)
#: Decode: one token through a Llama-3.2-1B-shaped layer (hidden 2048, MLP 8192, 32 query and 8
#: KV heads of 64), at the fixed-point datatypes only: their per-call preparation is what one row
#: exposes, while the float branches compute per element alike at any shape. Labelled "decode".
DECODE_SHAPES = (
    "RmsNorm:y=1x2048,x=1x2048,weight=2048",
    "FusedAddRmsNorm:y=1x2048,residual_out=1x2048,x=1x2048,residual=1x2048,weight=2048",
    "SiluAndMul:y=1x8192,x=1x16384",
    "GeluAndMul:y=1x8192,x=1x16384",
    "Rope:y=1x32x1x64,x=1x32x1x64,cos=1x32,sin=1x32",
    "Rope:y=1x8x1x64,x=1x8x1x64,cos=1x32,sin=1x32",
)
#: The norms' 16-bit cases again with the weights of 16a8w and 16a16w (the dtype cases give 8a8w's).
NORMS = ("RmsNorm", "FusedAddRmsNorm")
NORM_WEIGHTS = {"16a8w": Datatype.UFIXED_POINT_8, "16a16w": Datatype.SFIXED_POINT_16}
#: The ops whose one enum parameter is checked at each of its values: op -> value count.
ENUM_PARAMS = {  # approximate none/tanh, style neox/gptj, negative skip/from_end
    "GeluAndMul": 2,
    "Rope": 2,
    **dict.fromkeys(("CtxScatter", "CtxGather", "CtxScatterCb", "CtxGatherCb"), 2),
}
CTX_LEN = 16
FIXED_POINT = (KernelDType.UFixed8, KernelDType.UFixed16)
FIXED_POINT_DATATYPES = (Datatype.UFIXED_POINT_8, Datatype.UFIXED_POINT_16)


def _indices(case: KernelCase, package: OpPackage, generator: np.random.Generator) -> KernelCase:
    """The case with its int32 inputs made meaningful: positions in [-2, CTX_LEN] (padding, a
    row counted from the end, one past the end), batch slots a permutation."""
    inputs = []
    for tensor, definition in zip(case.inputs, package.ops[case.op].inputs):
        if tensor.dtype is not KernelDType.Int32:
            inputs.append(tensor)
        elif definition.name == "batch_index":
            slots = generator.permutation(tensor.array.size).astype(np.int32).reshape(tensor.array.shape)
            inputs.append(KernelTensor(slots, tensor.dtype))
        else:
            positions = generator.integers(-2, CTX_LEN, size=tensor.array.shape, endpoint=True)
            inputs.append(KernelTensor(positions.astype(np.int32), tensor.dtype))
    return dataclasses.replace(case, inputs=tuple(inputs))


def _with_enum(case: KernelCase, value: int) -> KernelCase:
    """The case with its one enum parameter set to ``value`` (a rank-0 UINT_32 index)."""
    param = KernelTensor(np.array(value, dtype=np.uint32), KernelDType.UInt32)
    return dataclasses.replace(case, label=f"{case.label} enum={value}", params=(param,))


def _cache_encoding(case: KernelCase) -> KernelCase | None:
    """A KV-cache op's fixed-point case with its output and updates in the cache's encoding, as
    ``llm_quant_overrides()`` makes them (rows then move as codes); None for any other case."""
    if not case.op.startswith("Ctx") or case.inputs[0].dtype not in FIXED_POINT:
        return None
    cache = case.inputs[0]

    def shared(tensor: KernelTensor) -> KernelTensor:
        same = tensor.dtype is cache.dtype
        return dataclasses.replace(tensor, scale=cache.scale, offset=cache.offset) if same else tensor

    return dataclasses.replace(
        case,
        label=f"{case.label} shared",
        outputs=tuple(map(shared, case.outputs)),
        inputs=(cache, *map(shared, case.inputs[1:])),
    )


def _norm_weights(case: KernelCase, generator: np.random.Generator) -> list[KernelCase]:
    """A norm's 16-bit case again with each weight of ``NORM_WEIGHTS`` (its last input), labelled
    with its scheme; none for any other case."""
    if case.op not in NORMS or case.outputs[0].dtype is not KernelDType.UFixed16:
        return []
    dims = case.inputs[-1].array.shape
    return [
        dataclasses.replace(
            case,
            label=f"{case.label} {scheme}",
            inputs=(*case.inputs[:-1], random_tensor(datatype, dims, generator)),
        )
        for scheme, datatype in NORM_WEIGHTS.items()
    ]


def _decode(case: KernelCase) -> KernelCase:
    return dataclasses.replace(case, label=f"{case.label} decode")


def hexagon_cases(package: OpPackage, seed: int = 0) -> list[KernelCase]:
    """Every op of the LlmOpPackage at every datatype its output declares, each enum value, the
    KV-cache ops' fixed-point cases again with one shared encoding, the norms' 16-bit ones with
    each 16-bit scheme's weight, and one decode token at the fixed-point datatypes."""
    generator = np.random.default_rng(seed)
    decode = dtype_cases(package, DECODE_SHAPES, seed, FIXED_POINT_DATATYPES)
    cases = []
    for case in dtype_cases(package, SHAPES, seed) + [_decode(case) for case in decode]:
        case = _indices(case, package, generator)
        values = ENUM_PARAMS.get(case.op, 0)
        cases += [_with_enum(case, value) for value in range(values)] if values else [case]
        cases += [shared for shared in [_cache_encoding(case)] if shared is not None]
        cases += _norm_weights(case, generator)
    return cases
