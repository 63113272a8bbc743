// The HVX path of LlmOpPackage::Rope (kernels/Rope.h) on Hexagon: 8-bit codes with 8-bit tables,
// packed rows, and the 16-bit scheme of rope_codes.h on int16/int32 lanes, bit for bit with it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "llm_hvx.h"
#include "rope_codes.h"

#if defined(__HVX__)
namespace LlmOpPackage {

// 8-bit codes and tables on HVX. The pairs (a, b) of 128 codes meet their angles in int16 lanes:
// gptj's pairs are the even and odd codes of a row (what vzxt splits), neox's two runs of codes
// a half apart, each split even/odd, with the tables laid out to match once per call.
struct RopeLanes {
  HVX_Vector a, b, cosine, sine;  // 64 int16 lanes each, one pair per lane
};

// (a c k_c - b s k_s, b c k_c + a s k_s) of 64 lanes, shifted as apply() does, plus y's zero
// point, saturated to int16 lanes in the input's order.
inline HVX_VectorPair rotated(const RopeLanes& lanes, const RopeScale& scale, int32_t zero_point) {
  const HVX_Vector negative_sine = Q6_Vh_vsub_VhVh(Q6_V_vzero(), lanes.sine);
  return Q6_W_vcombine_VV(hvx::products_terms(lanes.b, lanes.cosine, lanes.a, lanes.sine, scale, zero_point),
                          hvx::products_terms(lanes.a, lanes.cosine, lanes.b, negative_sine, scale, zero_point));
}

// A table's centered codes as int16, each of its `rows` rows of `half` angles padded to whole
// blocks of `block`; neox's rows split even/odd per block as its codes are.
inline std::vector<int16_t> table_lanes(const std::vector<int32_t>& centered, int64_t rows, int64_t half,
                                        int64_t block, bool even_odd) {
  const int64_t padded = (half + block - 1) / block * block;
  std::vector<int16_t> lanes(static_cast<size_t>(rows * padded), 0);
  for (int64_t s = 0; s < rows; ++s) {
    for (int64_t start = 0; start < half; start += block) {  // no division per angle: a call on Hexagon
      const int64_t count = half - start < block ? half - start : block;
      int16_t* to = &lanes[s * padded + start];
      const int32_t* from = &centered[s * half + start];
      for (int64_t k = 0; k < count; ++k) {
        to[even_odd ? k % 2 * (block / 2) + k / 2 : k] = static_cast<int16_t>(from[k]);
      }
    }
  }
  return lanes;
}

// gptj: 64 pairs per step, a and b the even and odd codes; y's even and odd codes interleaved back.
inline void rope_gptj_row_hvx(uint8_t* out, const uint8_t* row, const int16_t* cosine, const int16_t* sine,
                              int64_t half, const RopeScale& scale, int32_t in_offset, int32_t zero_point) {
  for (int64_t i = 0; i < half; i += qco::hvx::kBytes / 2) {
    const int64_t count = 2 * (half - i);  // codes, and bytes of the tables' int16 lanes
    const HVX_VectorPair pairs = qco::hvx::centered_halves(qco::hvx::load_bytes(row + 2 * i, count), in_offset);
    const RopeLanes lanes{Q6_V_lo_W(pairs), Q6_V_hi_W(pairs), qco::hvx::load_bytes(cosine + i, count),
                          qco::hvx::load_bytes(sine + i, count)};
    const HVX_VectorPair y = rotated(lanes, scale, zero_point);
    qco::hvx::store_bytes(out + 2 * i, Q6_Vub_vsat_VhVh(Q6_V_hi_W(y), Q6_V_lo_W(y)), count);
  }
}

// neox: 128 pairs per step, a = row[i...] and b = row[half + i...], each split even/odd.
inline void rope_neox_row_hvx(uint8_t* out, const uint8_t* row, const int16_t* cosine, const int16_t* sine,
                              int64_t half, const RopeScale& scale, int32_t in_offset, int32_t zero_point) {
  for (int64_t i = 0; i < half; i += qco::hvx::kBytes) {
    const int64_t count = half - i;
    const HVX_VectorPair a = qco::hvx::centered_halves(qco::hvx::load_bytes(row + i, count), in_offset);
    const HVX_VectorPair b = qco::hvx::centered_halves(qco::hvx::load_bytes(row + half + i, count), in_offset);
    const HVX_Vector* c = reinterpret_cast<const HVX_Vector*>(cosine + i);
    const HVX_Vector* s = reinterpret_cast<const HVX_Vector*>(sine + i);
    const HVX_VectorPair even = rotated({Q6_V_lo_W(a), Q6_V_lo_W(b), qco::hvx::load(c), qco::hvx::load(s)}, scale,
                                        zero_point);
    const HVX_VectorPair odd = rotated({Q6_V_hi_W(a), Q6_V_hi_W(b), qco::hvx::load(c + 1), qco::hvx::load(s + 1)},
                                       scale, zero_point);
    qco::hvx::store_bytes(out + i, Q6_Vub_vsat_VhVh(Q6_V_lo_W(odd), Q6_V_lo_W(even)), count);
    qco::hvx::store_bytes(out + half + i, Q6_Vub_vsat_VhVh(Q6_V_hi_W(odd), Q6_V_hi_W(even)), count);
  }
}

inline void rope_u8_hvx(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos_table,
                        const qco::TensorView& sin_table, const RopeGeometry& g) {
  const bool neox = g.style == kRopeNeox;
  const int64_t half = g.half;
  const int64_t block = neox ? qco::hvx::kBytes : qco::hvx::kBytes / 2;
  const int64_t padded = (half + block - 1) / block * block;
  const std::vector<int16_t> cosine = table_lanes(centered_codes(cos_table), g.table_rows(), half, block, neox);
  const std::vector<int16_t> sine = table_lanes(centered_codes(sin_table), g.table_rows(), half, block, neox);
  const RopeScale scale = rope_scale(y, x, cos_table, sin_table);
  const uint8_t* in = x.as<const uint8_t>();
  uint8_t* out = y.as<uint8_t>();
  for (int64_t r = 0; r < g.rows; ++r) {
    const int64_t base = r * g.head_dim, angles = g.angles(r) / half * padded;
    if (neox) {
      rope_neox_row_hvx(out + base, in + base, &cosine[angles], &sine[angles], half, scale, x.offset, -y.offset);
    } else {
      rope_gptj_row_hvx(out + base, in + base, &cosine[angles], &sine[angles], half, scale, x.offset, -y.offset);
    }
  }
}

// 8-bit codes when whole rows fill a vector (head_dim divides 128, every channel rotating): each
// vector of 128 codes is rotated at once, y = v c k_c + p s' k_s per element, with p its partner
// (neox: the code half a row away, gptj: its pair's other code) and s' the sine negated where the
// rotation subtracts (neox's first half of a row, gptj's even codes). The k = 128 / head_dim rows
// of a vector take their angles from k consecutive table rows (seq a multiple of k), or all from
// one (seq 1: decode), so each such group of table rows is widened into coefficient vectors once
// per call, by vector work (no scalar loop per angle): a decode call prepares one group.
struct RopePacked {
  int64_t rows;     // k: rows per vector
  bool repeat;      // seq 1: a vector's rows share one table row
  int64_t groups;   // of table rows, each one group of coefficients
  int64_t cycle;    // groups a batch's vectors cycle through (its sequences' k-row steps; 1 when repeating)
  int64_t batches;  // with tables per sequence, else 1 (the whole tensor one batch)
  int64_t vectors;  // of codes per batch
  int64_t table;    // codes per table (its numel, without a loop over its rank)
};

// Counted with shifts: k is a power of two, and an int64 division is a library call of tens of
// packets on Hexagon.
inline bool rope_packs(const RopeGeometry& g, const qco::TensorView& y, const qco::TensorView& x,
                       const qco::TensorView& cos, const qco::TensorView& sin, RopePacked& packed) {
  const int64_t head = g.head_dim;
  const bool rows = head <= qco::hvx::kBytes && (head & (head - 1)) == 0 && 2 * g.half == head;
  const bool zero_point = y.offset >= -32767 && y.offset <= 32512;  // rounded_halves' zero points
  if (!is_8_bit(cos.dtype) || !is_8_bit(sin.dtype) || !rows || !zero_point) return false;
  const int32_t bits = 7 - __builtin_ctzll(static_cast<uint64_t>(head));  // k = 2^bits = 128 / head_dim
  const int64_t k = int64_t{1} << bits;
  const bool repeat = g.seq == 1 && k > 1;
  if (repeat ? g.per_sequence && (g.heads & (k - 1)) != 0 : (g.seq & (k - 1)) != 0) return false;
  const int64_t batches = g.per_sequence ? x.dims[0] : 1, table_rows = batches * g.seq;
  const int64_t vectors = g.per_sequence ? (g.heads * g.seq) >> bits : (g.rows * head + qco::hvx::kBytes - 1) >> 7;
  packed = {k, repeat, repeat ? table_rows : table_rows >> bits, repeat ? 1 : g.seq >> bits, batches, vectors,
            table_rows * g.half};
  return true;
}

// 0, 1, ..., 127: byte i of it is its index (subtracting_bytes' masks without a loop).
alignas(128) inline constexpr uint8_t kByteIndex[128] = {
    0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,  14,  15,  16,  17,  18,  19,  20,  21,
    22,  23,  24,  25,  26,  27,  28,  29,  30,  31,  32,  33,  34,  35,  36,  37,  38,  39,  40,  41,  42,  43,
    44,  45,  46,  47,  48,  49,  50,  51,  52,  53,  54,  55,  56,  57,  58,  59,  60,  61,  62,  63,  64,  65,
    66,  67,  68,  69,  70,  71,  72,  73,  74,  75,  76,  77,  78,  79,  80,  81,  82,  83,  84,  85,  86,  87,
    88,  89,  90,  91,  92,  93,  94,  95,  96,  97,  98,  99,  100, 101, 102, 103, 104, 105, 106, 107, 108, 109,
    110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127};

// Byte i of 128 codes true where the rotation subtracts: neox's first half of each row (bit
// log2(half) of i clear, rows of a power of two), gptj's even codes (bit 0 clear).
inline HVX_VectorPred subtracting_bytes(const RopeGeometry& g) {
  const int32_t bit = g.style == kRopeGptj ? 1 : static_cast<int32_t>(g.half);
  const HVX_Vector index = *reinterpret_cast<const HVX_Vector*>(kByteIndex);
  return Q6_Q_vcmp_eq_VbVb(Q6_V_vand_VV(index, Q6_Vb_vsplat_R(bit)), Q6_V_vzero());
}

// The codes of one group's angles laid out as its 128 elements meet them, cos's in lo and sin's in
// hi: `block` codes of each table from the group's (at most 64: k rows of head_dim / 2, or one row),
// cos's in bytes [0, block) and sin's in [64, 64 + block) of one vector, so that one shuffle lays
// out both. Each angle is repeated for the two codes of its pair (gptj: neighbours, neox: half a
// row apart); a group repeating one table row (of half bytes, a power of two) first tiles it over
// each 64-byte half, both at once, by one vrdelta: byte i takes byte i & (half - 1) of its half,
// the index bits 64 - half selects flipped by the network's stages (no loop of rotations, whose
// each step waits on the one before).
inline HVX_VectorPair group_codes(const qco::TensorView& cos, const qco::TensorView& sin, int64_t group,
                                  const RopeGeometry& g, const RopePacked& packed) {
  const int64_t block = packed.repeat ? g.half : packed.rows * g.half, at = group * block;
  const HVX_Vector c = qco::hvx::load_tail(cos.as<const uint8_t>() + at, block);
  const HVX_Vector s = qco::hvx::load_tail(sin.as<const uint8_t>() + at, block);
  HVX_Vector t = Q6_V_vor_VV(c, Q6_V_vror_VR(s, qco::hvx::kBytes / 2));
  if (packed.repeat) {
    const HVX_Vector index = *reinterpret_cast<const HVX_Vector*>(kByteIndex);
    t = Q6_V_vrdelta_VV(t, Q6_V_vand_VV(index, Q6_Vb_vsplat_R(static_cast<int32_t>(qco::hvx::kBytes / 2 - g.half))));
  }
  const int64_t size = g.style == kRopeGptj ? 1 : (packed.repeat ? qco::hvx::kBytes / 2 : g.half);
  return Q6_W_vshuff_VVR(t, t, static_cast<int32_t>(-size));
}

// A group's coefficients as int32 lanes, C = c k_c and S = s' k_s (s' the sine negated where the
// rotation subtracts), one vector per quarter of its 128 elements: [0] the even elements' even
// lanes, [1] their odd lanes, [2] and [3] the same of the odd elements (the layout of
// centered_halves' lo and hi, each split as vmpyie and vmpyio take its halfwords). Products of the
// codes with whole coefficients take one 16x32 multiply each (8 per vector) where 16x16 products
// scaled afterwards took 12.
struct RopeGroup {
  HVX_Vector cosine[4], sine[4];
};

// 64 int16 lanes times k (below 2^15) as words: the even lanes' products, then the odd ones'.
inline void scaled_words(HVX_Vector halves, int64_t k, HVX_Vector* words) {
  const HVX_VectorPair product = Q6_Ww_vmpy_VhRh(halves, static_cast<int32_t>(k * 0x10001));
  words[0] = Q6_V_lo_W(product);
  words[1] = Q6_V_hi_W(product);
}

// What every group's coefficients take from the call: the tables' encodings and the scale ratios.
struct RopeTables {
  bool cos_signed, sin_signed;
  int32_t cos_offset, sin_offset;
  int64_t cos_ratio, sin_ratio;
  HVX_VectorPred negate[2];  // the halfword lanes of lo and hi whose sine is negated
};

inline RopeTables rope_tables(const qco::TensorView& cos, const qco::TensorView& sin, const RopeScale& scale,
                              HVX_VectorPred subtracting) {
  const HVX_VectorPair subtract = Q6_Wuh_vzxt_Vub(Q6_V_vand_QR(subtracting, 0x01010101));
  const HVX_Vector zero = Q6_V_vzero();
  return {is_signed_code(cos),
          is_signed_code(sin),
          cos.offset,
          sin.offset,
          scale.first,
          scale.second,
          {Q6_Q_vcmp_gt_VhVh(Q6_V_lo_W(subtract), zero), Q6_Q_vcmp_gt_VhVh(Q6_V_hi_W(subtract), zero)}};
}

inline RopeGroup rope_group(const qco::TensorView& cos, const qco::TensorView& sin, int64_t i, const RopeGeometry& g,
                            const RopePacked& packed, const RopeTables& t) {
  const HVX_VectorPair codes = group_codes(cos, sin, i, g, packed);
  const HVX_VectorPair c = hvx::centered_halves(Q6_V_lo_W(codes), t.cos_signed, t.cos_offset);
  const HVX_VectorPair s = hvx::centered_halves(Q6_V_hi_W(codes), t.sin_signed, t.sin_offset);
  const HVX_Vector zero = Q6_V_vzero();
  RopeGroup group;
  for (int32_t part = 0; part < 2; ++part) {
    const HVX_Vector sine = part == 0 ? Q6_V_lo_W(s) : Q6_V_hi_W(s);
    scaled_words(part == 0 ? Q6_V_lo_W(c) : Q6_V_hi_W(c), t.cos_ratio, group.cosine + 2 * part);
    scaled_words(Q6_V_vmux_QVV(t.negate[part], Q6_Vh_vsub_VhVh(zero, sine), sine), t.sin_ratio, group.sine + 2 * part);
  }
  return group;
}

// The rounding shift of rope_u8_vector: apply({1, shift}, w) is floor((w + 2^(shift-1)) / 2^shift),
// taken as an arithmetic shift by `pre` and a rounding one by `round` (at most 15, what vasr's
// rounding form takes) that packs two word vectors into int16 lanes: floor(floor(w / 2^pre) / 2^n)
// is floor(w / 2^(pre + n)), so the two shifts round as the one does.
struct RopeShift {
  int32_t pre, round;
};

inline RopeShift rope_shift(int32_t shift) {
  const int32_t round = shift < 15 ? shift : 15;
  return {shift - round, round};
}

// apply({1, shift}) of a part's even and odd words, packed to int16 lanes (saturated), plus y's
// zero point (saturated: with the zero point within [-32512, 32767] the saturations compose to
// the one to [0, 255] that follows).
inline HVX_Vector rounded_halves(HVX_Vector even, HVX_Vector odd, RopeShift shift, HVX_Vector zero_point) {
  const HVX_Vector packed = Q6_Vh_vasr_VwVwR_rnd_sat(Q6_Vw_vasr_VwR(odd, shift.pre), Q6_Vw_vasr_VwR(even, shift.pre),
                                                     shift.round);
  return Q6_Vh_vadd_VhVh_sat(packed, zero_point);
}

// a C + p S of one part (64 int16 lanes of codes and partners, as centered_halves gives them) and
// its coefficients (words[0] even lanes, words[1] odd), rounded: the even lanes by vmpyie (signed
// halfwords, accumulated from zero), the odd ones by vmpyio.
inline HVX_Vector rotated_part(HVX_Vector a, HVX_Vector p, const HVX_Vector* cosine, const HVX_Vector* sine,
                               RopeShift shift, HVX_Vector zero_point) {
  const HVX_Vector even = Q6_Vw_vmpyieacc_VwVwVh(Q6_Vw_vmpyieacc_VwVwVh(Q6_V_vzero(), cosine[0], a), sine[0], p);
  const HVX_Vector odd = Q6_Vw_vadd_VwVw(Q6_Vw_vmpyio_VwVh(cosine[1], a), Q6_Vw_vmpyio_VwVh(sine[1], p));
  return rounded_halves(even, odd, shift, zero_point);
}

// What every vector of a call shares: where its partners are, the rounding, the zero points.
struct RopeStep {
  HVX_VectorPred first_half;  // neox: the codes whose partner is ahead
  int32_t ahead, behind;      // neox: the rotations bringing a code's partner
  RopeShift shift;
  int32_t in_offset;
  HVX_Vector zero_point;  // y's, int16 lanes
};

// One vector of 128 codes rotated by its group's coefficients (rope_u8_packed's step).
template <bool kGptj>
inline HVX_Vector rope_u8_vector(HVX_Vector codes, const RopeGroup& angles, const RopeStep& step) {
  const HVX_VectorPair a = qco::hvx::centered_halves(codes, step.in_offset);
  HVX_VectorPair p;
  if constexpr (kGptj) {
    p = Q6_W_vcombine_VV(Q6_V_lo_W(a), Q6_V_hi_W(a));
  } else {
    const HVX_Vector partners =
        Q6_V_vmux_QVV(step.first_half, Q6_V_vror_VR(codes, step.ahead), Q6_V_vror_VR(codes, step.behind));
    p = qco::hvx::centered_halves(partners, step.in_offset);
  }
  const HVX_Vector even = rotated_part(Q6_V_lo_W(a), Q6_V_lo_W(p), angles.cosine, angles.sine, step.shift,
                                       step.zero_point);
  const HVX_Vector odd = rotated_part(Q6_V_hi_W(a), Q6_V_hi_W(p), angles.cosine + 2, angles.sine + 2, step.shift,
                                      step.zero_point);
  return Q6_Vub_vsat_VhVh(odd, even);
}

// The vectors of every batch, two at a time where both are whole (one block, no branch between
// them: their dependency chains share packets), then the rest one by one. kOne: a single group
// (decode), read once into registers (through `groups` every step: a uint8_t store may alias it),
// four vectors a step. The packed path is inlined whole into rotate_codes (always_inline): each
// call boundary costs a decode call a frame, and the group would go through memory.
template <bool kGptj, bool kOne>
[[gnu::always_inline]] inline void rope_u8_packed_walk(uint8_t* out, const uint8_t* in, const RopeGroup* groups,
                                                      const RopePacked& packed, int64_t total, const RopeStep& step) {
  const RopeStep s = step;
  const RopeGroup one = groups[0];
  // kOne: a single group is a single batch's (one group of table rows), whose vectors are the
  // whole tensor's: the loops need no count of their own.
  const int64_t cycle = packed.cycle, vectors = packed.vectors, batches = kOne ? 1 : packed.batches;
  int64_t at = 0;
  for (int64_t b = 0; b < batches; ++b, groups += cycle) {
    int64_t phase = 0, v = 0;  // phase: of the vector in its group cycle
    constexpr int64_t kStep = kOne ? 4 : 2;
    for (; (kOne || v + kStep <= vectors) && total - at >= kStep * qco::hvx::kBytes;
         v += kStep, at += kStep * qco::hvx::kBytes) {
      HVX_Vector y[kStep];
      for (int64_t i = 0; i < kStep; ++i) {
        const RopeGroup& group = kOne ? one : groups[phase];
        phase = phase + 1 == cycle ? 0 : phase + 1;
        y[i] = rope_u8_vector<kGptj>(qco::hvx::load(in + at + i * qco::hvx::kBytes), group, s);
      }
      for (int64_t i = 0; i < kStep; ++i) qco::hvx::store(out + at + i * qco::hvx::kBytes, y[i]);
    }
    for (; kOne ? at < total : v < vectors; ++v, at += qco::hvx::kBytes) {
      const HVX_Vector codes = qco::hvx::load_bytes(in + at, total - at);
      qco::hvx::store_bytes(out + at, rope_u8_vector<kGptj>(codes, kOne ? one : groups[phase], s), total - at);
      phase = phase + 1 == cycle ? 0 : phase + 1;
    }
  }
}

// A decode call's one group is made where the walk reads it (in registers: the walk is inlined);
// more groups are laid out in memory first, one per vector cycle position.
template <bool kGptj>
[[gnu::always_inline]] inline void rope_u8_packed_style(uint8_t* out, const uint8_t* in, const qco::TensorView& cos,
                                                        const qco::TensorView& sin, const RopeGeometry& g,
                                                        const RopePacked& packed, const RopeTables& tables,
                                                        const RopeStep& step) {
  const int64_t total = g.rows * g.head_dim;
  if (packed.groups == 1) {
    const RopeGroup one = rope_group(cos, sin, 0, g, packed, tables);
    rope_u8_packed_walk<kGptj, true>(out, in, &one, packed, total, step);
    return;
  }
  const std::unique_ptr<RopeGroup[]> groups(new RopeGroup[static_cast<size_t>(packed.groups)]);
  for (int64_t i = 0; i < packed.groups; ++i) groups[i] = rope_group(cos, sin, i, g, packed, tables);
  rope_u8_packed_walk<kGptj, false>(out, in, groups.get(), packed, total, step);
}

[[gnu::always_inline]] inline void rope_u8_packed(qco::TensorView& y, const qco::TensorView& x,
                                                 const qco::TensorView& cos, const qco::TensorView& sin,
                                                 const RopeGeometry& g, const RopePacked& packed) {
  const HVX_VectorPred subtracting = subtracting_bytes(g);
  const RopeScale scale = rope_scale(y, x, cos, sin);
  const RopeTables tables = rope_tables(cos, sin, scale, subtracting);
  const int32_t ahead = static_cast<int32_t>(g.half);
  const RopeStep step{subtracting, ahead, static_cast<int32_t>(qco::hvx::kBytes) - ahead, rope_shift(scale.shift),
                      x.offset, Q6_Vh_vsplat_R(-y.offset)};
  if (g.style == kRopeGptj) {
    rope_u8_packed_style<true>(y.as<uint8_t>(), x.as<const uint8_t>(), cos, sin, g, packed, tables, step);
  } else {
    rope_u8_packed_style<false>(y.as<uint8_t>(), x.as<const uint8_t>(), cos, sin, g, packed, tables, step);
  }
}

// 16-bit codes on HVX: rope_u16 on int32 lanes, 32 pairs a product. The rows are taken table row
// by table row, so the coefficients of each block of a table row's angles are computed once, by
// vector work, for every head that meets them (no scalar loop per angle, no heap): a decode call
// computes one table row's.

// `count` codes of a table from code `at` (the rest 0) as 64 16-bit lanes in order, an 8-bit
// table's widened by vunpack (which keeps the order vzxt splits).
inline HVX_Vector table_halfwords(const qco::TensorView& table, int64_t at, int64_t count) {
  if (is_8_bit(table.dtype)) {
    const HVX_Vector bytes = qco::hvx::load_bytes(table.as<const uint8_t>() + at, count);
    return Q6_V_lo_W(is_signed_code(table) ? Q6_Wh_vunpack_Vb(bytes) : Q6_Wuh_vunpack_Vub(bytes));
  }
  return qco::hvx::load_bytes(table.as<const uint16_t>() + at, 2 * count);
}

// apply(multiplier, c) of 64 table codes (as table_halfwords gives them), each centered: lo the
// even codes' coefficients, hi the odd ones' (centered_words' layout).
inline HVX_VectorPair coefficient_words(const qco::TensorView& table, HVX_Vector halfwords, FixedMultiplier multiplier) {
  const HVX_VectorPair wide = is_signed_code(table) ? Q6_Ww_vsxt_Vh(halfwords) : Q6_Wuw_vzxt_Vuh(halfwords);
  const HVX_Vector add = Q6_V_vsplat_R(table.offset);
  const HVX_Vector mantissa = Q6_V_vsplat_R(static_cast<int32_t>(multiplier.mantissa));
  const auto scaled = [&](HVX_Vector words) {
    const HVX_VectorPair product = qco::hvx::products_wide(Q6_Vw_vadd_VwVw(words, add), mantissa);
    return multiplier.shift > 32 ? qco::hvx::rounding_shift_high(product, multiplier.shift)
                                 : qco::hvx::rounding_shift_low(product, multiplier.shift);
  };
  return Q6_W_vcombine_VV(scaled(Q6_V_hi_W(wide)), scaled(Q6_V_lo_W(wide)));
}

// v C + p S' of 32 lanes (S' the sine negated where the rotation subtracts), apply({1, q}) + y's
// zero point, as int32 lanes.
template <bool kLow>
inline HVX_Vector rotated16(HVX_Vector v, HVX_Vector p, HVX_Vector cosine, HVX_Vector sine, int32_t q,
                            HVX_Vector zero_point) {
  const HVX_VectorPair sum = qco::hvx::add_wide(qco::hvx::products_wide(cosine, v), qco::hvx::products_wide(sine, p));
  return Q6_Vw_vadd_VwVw(kLow ? qco::hvx::rounding_shift_low(sum, q) : qco::hvx::rounding_shift_high(sum, q), zero_point);
}

// One block of a table row's coefficients, even and odd lanes (neox) or angles in order (gptj:
// [0] only): the sine negated for the codes that subtract (`first`) and not (`second`).
struct Rope16Block {
  HVX_Vector cosine[2], first[2], second[2];
};

// How a row meets its angles, by style and width: neox rows of 64 codes fill one vector, each code's
// partner the code half a vector away (the halves rotated); wider neox rows take 64 pairs a step, a
// = row[i...] and b = row[half + i...], each split even/odd; gptj 32 pairs a step, a and b the even
// and odd codes.
enum class Rope16Walk { kNeoxRow, kNeoxRuns, kGptj };

inline Rope16Walk rope16_walk(const RopeGeometry& g) {
  if (g.style == kRopeGptj) return Rope16Walk::kGptj;
  return g.head_dim == 64 && g.half == 32 ? Rope16Walk::kNeoxRow : Rope16Walk::kNeoxRuns;
}

// Angles per block: what one step of the walk meets.
inline int64_t rope16_block(Rope16Walk walk) { return walk == Rope16Walk::kNeoxRuns ? 64 : 32; }

template <Rope16Walk kWalk>
inline Rope16Block rope16_block_at(const qco::TensorView& cos, const qco::TensorView& sin, const Rope16& rope,
                                   int64_t at, int64_t count) {
  HVX_Vector c = table_halfwords(cos, at, count), s = table_halfwords(sin, at, count);
  if constexpr (kWalk == Rope16Walk::kNeoxRow) {  // the 32 angles for both halves of the row
    c = Q6_V_vor_VV(c, Q6_V_vror_VR(c, qco::hvx::kBytes / 2));
    s = Q6_V_vor_VV(s, Q6_V_vror_VR(s, qco::hvx::kBytes / 2));
  }
  HVX_VectorPair cw = coefficient_words(cos, c, rope.cosine), sw = coefficient_words(sin, s, rope.sine);
  if constexpr (kWalk == Rope16Walk::kGptj) {  // angles back in order: lo holds the first 32
    cw = Q6_W_vshuff_VVR(Q6_V_hi_W(cw), Q6_V_lo_W(cw), -4);
    sw = Q6_W_vshuff_VVR(Q6_V_hi_W(sw), Q6_V_lo_W(sw), -4);
  }
  const HVX_Vector zero = Q6_V_vzero();
  const HVX_VectorPred first_half = Q6_Q_vsetq_R(qco::hvx::kBytes / 2);  // kNeoxRow: lanes of the row's first half
  Rope16Block block;
  for (int32_t part = 0; part < 2; ++part) {
    const HVX_Vector sine = part == 0 ? Q6_V_lo_W(sw) : Q6_V_hi_W(sw), negated = Q6_Vw_vsub_VwVw(zero, sine);
    block.cosine[part] = part == 0 ? Q6_V_lo_W(cw) : Q6_V_hi_W(cw);
    block.first[part] = kWalk == Rope16Walk::kNeoxRow ? Q6_V_vmux_QVV(first_half, negated, sine) : negated;
    block.second[part] = sine;
  }
  return block;
}

// A neox row of 64 codes (one vector) rotated: each code's partner half a vector away.
template <bool kLow>
inline HVX_Vector rope16_row(HVX_Vector codes, const Rope16Block& k, int32_t q, int32_t in_offset,
                             HVX_Vector zero_point) {
  const HVX_VectorPair v = qco::hvx::centered_words(codes, in_offset);
  const auto rotated = [&](HVX_Vector words, int32_t part) {
    const HVX_Vector partner = Q6_V_vror_VR(words, qco::hvx::kBytes / 2);
    return rotated16<kLow>(words, partner, k.cosine[part], k.first[part], q, zero_point);
  };
  return qco::hvx::saturate_u16(rotated(Q6_V_lo_W(v), 0), rotated(Q6_V_hi_W(v), 1));
}

// Block `start` of one row (`count` angles of it) through the walk (a template parameter: one
// straight loop over the heads per walk, no branch per row).
template <Rope16Walk kWalk, bool kLow>
inline void rope16_step(uint16_t* out, const uint16_t* row, const Rope16Block& k, int64_t start, int64_t count,
                        int64_t half, int32_t q, int32_t in_offset, HVX_Vector zero_point) {
  if constexpr (kWalk == Rope16Walk::kNeoxRow) {
    qco::hvx::store(out, rope16_row<kLow>(qco::hvx::load(row), k, q, in_offset, zero_point));
  } else if constexpr (kWalk == Rope16Walk::kNeoxRuns) {
    const int64_t bytes = 2 * count;
    const HVX_VectorPair a = qco::hvx::centered_words(qco::hvx::load_bytes(row + start, bytes), in_offset);
    const HVX_VectorPair b = qco::hvx::centered_words(qco::hvx::load_bytes(row + half + start, bytes), in_offset);
    HVX_Vector ya[2], yb[2];
    for (int32_t part = 0; part < 2; ++part) {
      const HVX_Vector av = part == 0 ? Q6_V_lo_W(a) : Q6_V_hi_W(a), bv = part == 0 ? Q6_V_lo_W(b) : Q6_V_hi_W(b);
      ya[part] = rotated16<kLow>(av, bv, k.cosine[part], k.first[part], q, zero_point);
      yb[part] = rotated16<kLow>(bv, av, k.cosine[part], k.second[part], q, zero_point);
    }
    qco::hvx::store_bytes(out + start, qco::hvx::saturate_u16(ya[0], ya[1]), bytes);
    qco::hvx::store_bytes(out + half + start, qco::hvx::saturate_u16(yb[0], yb[1]), bytes);
  } else {
    const int64_t bytes = 4 * count;  // of the 2 count codes
    const HVX_VectorPair pairs = qco::hvx::centered_words(qco::hvx::load_bytes(row + 2 * start, bytes), in_offset);
    const HVX_Vector a = Q6_V_lo_W(pairs), b = Q6_V_hi_W(pairs);
    const HVX_Vector ya = rotated16<kLow>(a, b, k.cosine[0], k.first[0], q, zero_point);
    const HVX_Vector yb = rotated16<kLow>(b, a, k.cosine[0], k.second[0], q, zero_point);
    qco::hvx::store_bytes(out + 2 * start, qco::hvx::saturate_u16(ya, yb), bytes);
  }
}

template <Rope16Walk kWalk, bool kLow>
void rope_u16_hvx_rows(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                       const qco::TensorView& sin, const RopeGeometry& g, const Rope16& rope) {
  // Locals: a uint16_t store may alias the views, the geometry and `rope`, whose fields the head
  // loop would otherwise load again (and multiply out) after every row's store.
  const uint16_t* in = x.as<const uint16_t>();
  uint16_t* out = y.as<uint16_t>();
  const int64_t width = rope16_block(kWalk), batches = x.dims[0];
  const int64_t seq = g.seq, half = g.half, heads = g.heads, head_stride = g.seq * g.head_dim;
  const bool per_sequence = g.per_sequence;
  const int32_t q = rope.shift, in_offset = x.offset;
  const HVX_Vector zero_point = Q6_V_vsplat_R(-y.offset);
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const int64_t angles = ((per_sequence ? b * seq : 0) + s) * half;
      const int64_t first = (b * heads * seq + s) * g.head_dim;
      for (int64_t start = 0; start < half; start += width) {
        const int64_t count = half - start < width ? half - start : width;
        const Rope16Block block = rope16_block_at<kWalk>(cos, sin, rope, angles + start, count);
        const uint16_t* row = in + first;
        uint16_t* to = out + first;
        int64_t h = 0;
        if constexpr (kWalk == Rope16Walk::kNeoxRow) {  // two rows a step: both loaded before either is stored
          for (; h + 2 <= heads; h += 2, row += 2 * head_stride, to += 2 * head_stride) {
            const HVX_Vector r0 = qco::hvx::load(row), r1 = qco::hvx::load(row + head_stride);
            const HVX_Vector y0 = rope16_row<kLow>(r0, block, q, in_offset, zero_point);
            const HVX_Vector y1 = rope16_row<kLow>(r1, block, q, in_offset, zero_point);
            qco::hvx::store(to, y0);
            qco::hvx::store(to + head_stride, y1);
          }
        }
        for (; h < heads; ++h, row += head_stride, to += head_stride) {
          rope16_step<kWalk, kLow>(to, row, block, start, count, half, q, in_offset, zero_point);
        }
      }
    }
  }
}

template <Rope16Walk kWalk>
void rope_u16_hvx_walk(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                       const qco::TensorView& sin, const RopeGeometry& g, const Rope16& rope) {
  if (rope.shift >= 33) {
    rope_u16_hvx_rows<kWalk, false>(y, x, cos, sin, g, rope);
  } else {
    rope_u16_hvx_rows<kWalk, true>(y, x, cos, sin, g, rope);
  }
}

inline void rope_u16_hvx(qco::TensorView& y, const qco::TensorView& x, const qco::TensorView& cos,
                         const qco::TensorView& sin, const RopeGeometry& g, const Rope16& rope) {
  switch (rope16_walk(g)) {
    case Rope16Walk::kNeoxRow: rope_u16_hvx_walk<Rope16Walk::kNeoxRow>(y, x, cos, sin, g, rope); break;
    case Rope16Walk::kNeoxRuns: rope_u16_hvx_walk<Rope16Walk::kNeoxRuns>(y, x, cos, sin, g, rope); break;
    case Rope16Walk::kGptj: rope_u16_hvx_walk<Rope16Walk::kGptj>(y, x, cos, sin, g, rope); break;
  }
}

}  // namespace LlmOpPackage
#endif
