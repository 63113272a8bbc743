// The gated activations (SiluAndMul, GeluAndMul) on codes as the ops call them: which loops run
// (gated_hvx.h's on Hexagon with HVX, gated_codes.h's portable ones elsewhere) and the caches of
// the integers they read, prepared once per encoding (prepared_cache.h).
#pragma once

#include "gated_codes.h"
#include "gated_hvx.h"
#include "prepared_cache.h"

namespace LlmOpPackage {

// What the loops of this target read, prepared once per encoding (make_gate8, make_gate16).
#if defined(__HVX__)
using PreparedGate8 = Gate8Hvx;
using PreparedGate16 = Gate16Hvx;
#else
using PreparedGate8 = Gate8;
using PreparedGate16 = Gate16;
#endif

inline PreparedCache<GateKey, PreparedGate8, kGateSlots> gate8_cache;
inline PreparedCache<GateKey, PreparedGate16, kGateSlots> gate16_cache;

// The prepared integers of a gated activation at these encodings: a cache slot's, else made now
// (kept in a slot, or in `spare` for this call when every slot is taken); nullptr when no memory
// is left for them.
inline const PreparedGate16* gate16_for(const GateKey& key, const qco::TensorView& y, const qco::TensorView& x,
                                        decltype(gate16_cache)::Spare& spare) {
  return gate16_cache.find_or_make(key, spare, [&](PreparedGate16& g) { return make_gate16(g, key.act, y, x); });
}

inline const PreparedGate8* gate8_for(const GateKey& key, const qco::TensorView& y, const qco::TensorView& x,
                                      decltype(gate8_cache)::Spare& spare) {
  return gate8_cache.find_or_make(key, spare, [&](PreparedGate8& g) { return make_gate8(g, key.act, y, x); });
}

inline bool runs_on_codes(const qco::TensorView& y, const qco::TensorView& x) {
  return is_unsigned_code(x.dtype) && y.dtype == x.dtype;
}

// True when the gated op runs on codes (x and y of one unsigned fixed-point dtype; for 16-bit
// codes, encodings inside make_gate16's domain); then runs it. (Only when no memory is left for
// its prepared integers does a call take the float path instead.)
inline bool run_gated_codes(qco::TensorView& y, const qco::TensorView& x, Activation act) {
  if (!runs_on_codes(y, x)) return false;
  const GateKey key{act, qco::detail::encodings(y, x)};
  if (x.dtype == qco::DType::kUFixed16) {
    decltype(gate16_cache)::Spare spare;
    const PreparedGate16* gate = gate16_for(key, y, x, spare);
    if (gate == nullptr) return false;
#if defined(__HVX__)
    gated_u16_hvx(y, x, *gate);
#else
    decltype(terms16_cache)::Spare spare_terms;
    gated_u16(y, x, *gate, gate16_terms(key, *gate, spare_terms));
#endif
    return true;
  }
  decltype(gate8_cache)::Spare spare;
  const PreparedGate8* gate = gate8_for(key, y, x, spare);
  if (gate == nullptr) return false;
#if defined(__HVX__)
  gated_u8_hvx(y, x, *gate);
#else
  gated_u8(y, x, *gate);
#endif
  return true;
}

// What run_gated_codes prepares at these encodings, made ahead of the calls (the kernels'
// <Op>Prepare: QHPI's precompute at graph load), so a call finds it in its cache slot.
inline void prepare_gated_codes(const qco::TensorView& y, const qco::TensorView& x, Activation act) {
  if (!runs_on_codes(y, x)) return;
  const GateKey key{act, qco::detail::encodings(y, x)};
  if (x.dtype == qco::DType::kUFixed16) {
    decltype(gate16_cache)::Spare spare;
    const PreparedGate16* gate = gate16_for(key, y, x, spare);
#if defined(__HVX__)
    (void)gate;  // HVX reads the segments alone
#else
    decltype(terms16_cache)::Spare spare_terms;
    if (gate != nullptr) gate16_terms(key, *gate, spare_terms);
#endif
    return;
  }
  decltype(gate8_cache)::Spare spare;
  gate8_for(key, y, x, spare);
}

}  // namespace LlmOpPackage
