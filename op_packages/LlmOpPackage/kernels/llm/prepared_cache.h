// What a quantized kernel prepares from encodings alone (the gated activations' table of 256
// values, their 16-bit segment coefficients), kept per process so that only the first call at an
// encoding pays for it: a decode call, one row, would otherwise spend most of its packets there.
// A graph's op instances each have their encodings (one per layer), so the cache keeps the first
// kSlots keys it meets, and a slot once filled never changes: a call finds its value without a
// lock, and no call can see a value replaced under it. Past kSlots keys a call prepares its own.
// Every build prepares the same integers, cached or not: the cache changes packets, not bits.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>

namespace LlmOpPackage {

template <typename Key, typename Value, int32_t kSlots>
class PreparedCache {
  struct Entry {
    Key key;
    Value value;
  };

 public:
  // Holds a value prepared for one call when every slot is taken.
  using Spare = std::unique_ptr<Entry>;

  // The value for `key`: a slot's, else prepared by make(Value&) -> bool (false: the key is
  // outside the scheme's domain; nullptr is returned) and kept in the next free slot or `spare`.
  // Two calls missing the same key at once both prepare it (the same integers) and take a slot
  // each. nullptr also when no memory is left for it.
  template <typename Make>
  const Value* find_or_make(const Key& key, Spare& spare, Make&& make) {
    for (const std::atomic<const Entry*>& slot : slots_) {
      const Entry* entry = slot.load(std::memory_order_acquire);
      if (entry == nullptr) break;  // slots fill in order (one claimed, not yet stored: a miss)
      if (entry->key == key) return &entry->value;
    }
    Spare made(new (std::nothrow) Entry);  // default-initialized: no memset of the tables
    if (made == nullptr || !make(made->value)) return nullptr;
    made->key = key;
    int32_t index = used_.load(std::memory_order_relaxed);
    while (index < kSlots && !used_.compare_exchange_weak(index, index + 1, std::memory_order_relaxed)) {
    }
    if (index >= kSlots) {
      spare = std::move(made);
      return &spare->value;
    }
    slots_[index].store(made.get(), std::memory_order_release);
    return &made.release()->value;  // the slot's for the life of the process
  }

 private:
  std::atomic<const Entry*> slots_[kSlots] = {};
  std::atomic<int32_t> used_{0};
};

}  // namespace LlmOpPackage
