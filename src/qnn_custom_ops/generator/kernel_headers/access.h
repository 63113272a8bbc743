// Fast element access: write an op's math once, as a template over how it reads and writes
// elements, and let with_access() instantiate it on raw float pointers when every tensor is
// float32 (the loops vectorize: several times faster than load_real/store_real per element,
// whose dtype switch keeps a loop scalar), else through qco::load_real/store_real (fp16, fixed
// point and integers, dequantized and requantized with each tensor's own encoding).
//
//   template <typename Access>
//   void scale_rows(qco::TensorView& y, const qco::TensorView& x, float factor) {
//     const auto in = Access::in(x);
//     const auto out = Access::out(y);
//     const int64_t n = x.numel();
//     for (int64_t i = 0; i < n; ++i) out(i, factor * in(i));
//   }
//   ...
//   return qco::with_access({&y, &x}, [&](auto access) { scale_rows<decltype(access)>(y, x, 2.0f); });
#ifndef QCO_ACCESS_H_
#define QCO_ACCESS_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "qco/hvx.h"
#include "qco/tensor_view.h"

namespace qco {

// Element access on float32 data.
struct Float32Access {
  struct In {
    const float* data;
    float operator()(int64_t i) const { return data[i]; }
  };
  struct Out {
    float* data;
    void operator()(int64_t i, float value) const { data[i] = value; }
  };
  static In in(const TensorView& view) { return In{view.as<const float>()}; }
  static Out out(TensorView& view) { return Out{view.as<float>()}; }
};

// Element access on any dtype through the view's encoding.
struct RealAccess {
  struct In {
    const TensorView* view;
    float operator()(int64_t i) const { return load_real(*view, i); }
  };
  struct Out {
    TensorView* view;
    void operator()(int64_t i, float value) const { store_real(*view, i, value); }
  };
  static In in(const TensorView& view) { return In{&view}; }
  static Out out(TensorView& view) { return Out{&view}; }
};

// Runs `body(Float32Access{})` when every view is float32, else `body(RealAccess{})`; kOk.
// Check the dtypes your OpDef declares first: RealAccess computes on whatever it is given.
template <typename Body>
Status with_access(std::initializer_list<const TensorView*> views, Body&& body) {
  bool all_float32 = true;
  for (const TensorView* view : views) all_float32 = all_float32 && view->dtype == DType::kFloat32;
  if (all_float32) {
    body(Float32Access{});
  } else {
    body(RealAccess{});
  }
  return Status::kOk;
}

// A scalar parameter's value, or `fallback` (its OpDef default) when it is absent: the HTP
// always passes a defaulted parameter, the host's C ABI may not.
inline float param_or(const TensorView& param, float fallback) {
  return param.present() ? load_real(param, 0) : fallback;
}

// An Enum parameter's index, or `fallback` when it is absent.
inline uint32_t enum_or(const TensorView& param, uint32_t fallback) {
  return param.present() ? param.as<const uint32_t>()[0] : fallback;
}

// ---- Elementwise ops: y = f(x), f the op's float math, on every dtype ----

namespace detail {

// What an 8-bit code table depends on besides f: both tensors' dtypes and encodings.
struct Encodings {
  DType in_dtype, out_dtype;
  uint32_t in_scale, out_scale;  // the floats' bits: every scale, NaN included, is its own key
  int32_t in_offset, out_offset;
};

inline Encodings encodings(const TensorView& y, const TensorView& x) {
  Encodings key{x.dtype, y.dtype, 0, 0, x.offset, y.offset};
  std::memcpy(&key.in_scale, &x.scale, sizeof key.in_scale);
  std::memcpy(&key.out_scale, &y.scale, sizeof key.out_scale);
  return key;
}

inline bool same(const Encodings& a, const Encodings& b) {
  return a.in_dtype == b.in_dtype && a.out_dtype == b.out_dtype && a.in_scale == b.in_scale &&
         a.out_scale == b.out_scale && a.in_offset == b.in_offset && a.out_offset == b.out_offset;
}

// table[c] = f(x's code c), stored as y stores it (T: y's code type): the codes load_real, f and
// store_real give element by element. On copies of the views: a store through uint8_t may alias
// anything, so the compiler would reload their scales and redo a division every code.
template <typename T, typename F>
void fill_code_table(uint8_t (&table)[256], const TensorView& y, const TensorView& x, const F& f) {
  const TensorView in = x, out = y;
  const bool in_signed = in.dtype == DType::kSFixed8;
  for (int32_t c = 0; c < 256; ++c) {
    const int32_t code = in_signed ? static_cast<int8_t>(c) : c;
    table[c] = static_cast<uint8_t>(quantize<T>(f(in.dequantize(code)), out));
  }
}

template <typename F>
void fill_code_table(uint8_t (&table)[256], const TensorView& y, const TensorView& x, const F& f) {
  if (y.dtype == DType::kSFixed8) {
    fill_code_table<int8_t>(table, y, x, f);
  } else {
    fill_code_table<uint8_t>(table, y, x, f);
  }
}

// The code tables of one f (one lambda type) for the last kSlots encodings it met, shared by
// every call and thread: a spin lock guards the slots while a table is copied in or out, never
// while f runs.
struct CodeTables {
  static constexpr int32_t kSlots = 8;
  struct Slot {
    Encodings key;
    bool filled;
    uint8_t table[256];
  };
  std::atomic<bool> busy{false};
  int32_t next = 0;
  Slot slots[kSlots] = {};

  void lock() {
    while (busy.exchange(true, std::memory_order_acquire)) {
    }
  }
  void unlock() { busy.store(false, std::memory_order_release); }
};

template <typename F>
inline CodeTables code_tables{};

// The code table of f at these encodings: from the cache when f captures nothing (so it depends
// on the encodings alone), else computed.
template <typename F>
void code_table(uint8_t (&table)[256], const TensorView& y, const TensorView& x, const F& f) {
  if (!std::is_empty<F>::value) {
    fill_code_table(table, y, x, f);
    return;
  }
  CodeTables& cache = code_tables<F>;
  const Encodings key = encodings(y, x);
  cache.lock();
  for (const CodeTables::Slot& slot : cache.slots) {
    if (slot.filled && same(slot.key, key)) {
      std::memcpy(table, slot.table, sizeof table);
      cache.unlock();
      return;
    }
  }
  cache.unlock();
  fill_code_table(table, y, x, f);
  cache.lock();
  CodeTables::Slot& slot = cache.slots[cache.next];
  cache.next = (cache.next + 1) % CodeTables::kSlots;
  slot.key = key;
  slot.filled = true;
  std::memcpy(slot.table, table, sizeof table);
  cache.unlock();
}

inline bool is_8_bit_code(DType dtype) { return dtype == DType::kUFixed8 || dtype == DType::kSFixed8; }

}  // namespace detail

// y[i] = f(x[i]) for an elementwise op, f its float math (a lambda float -> float), y and x of one
// shape; kOk. What runs, by dtype:
// - float32 in and out: f on raw float pointers (the loop vectorizes when f does: qco::exp,
//   qco::sigmoid, ... from qco/math.h do);
// - 8-bit codes in and out (UFIXED_POINT_8, SFIXED_POINT_8): f is evaluated once per code into a
//   table of 256 output codes, looked up with vlut32 on HVX (about 0.07 packets per element) and
//   by a plain loop on the host: the same codes load_real, f and store_real give element by
//   element. A lambda that captures nothing depends on the encodings alone, so its table is
//   kept per encoding (the last 8) and later calls skip the 256 evaluations; one that captures (a
//   parameter's value) is evaluated every call.
// - anything else (16-bit codes, fp16, mixed dtypes): f per element through load_real/store_real,
//   on the scalar core (some 100 packets per element on Hexagon for a sigmoid): 16-bit codes
//   have no table lookup here (vlut16 reads 256 entries; the LlmOpPackage's gated activations fit
//   their 16-bit math in integers instead, gated_codes.h).
// What map_elementwise(y, x, f) prepares at these encodings, made ahead of its calls: for 8-bit
// codes, f's table of 256 output codes. Call it from the kernel's <Op>Prepare with the very f the
// kernel maps (one named lambda: tables are kept per lambda type, for its last 8 encodings).
template <typename F>
void prepare_elementwise(const TensorView& y, const TensorView& x, const F& f) {
  if (y.same_shape(x) && detail::is_8_bit_code(x.dtype) && detail::is_8_bit_code(y.dtype)) {
    uint8_t table[256];
    detail::code_table(table, y, x, f);
  }
}

template <typename F>
Status map_elementwise(TensorView& y, const TensorView& x, const F& f) {
  if (!y.same_shape(x)) return Status::kShapeMismatch;
  const int64_t n = x.numel();
  if (detail::is_8_bit_code(x.dtype) && detail::is_8_bit_code(y.dtype)) {
    uint8_t table[256];
    detail::code_table(table, y, x, f);
    map_bytes(y.as<uint8_t>(), x.as<const uint8_t>(), n, table);
    return Status::kOk;
  }
  return with_access({&y, &x}, [&](auto access) {
    const auto in = decltype(access)::in(x);
    const auto out = decltype(access)::out(y);
    for (int64_t i = 0; i < n; ++i) out(i, f(in(i)));
  });
}

}  // namespace qco

#endif  // QCO_ACCESS_H_
