// Generator: counter-based Philox4x32-10 (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC'11). Element i of a draw depends only on
// (seed, offset, i), so results are identical for any thread count.
#pragma once

#include <array>
#include <cstdint>

namespace kiln {

/// One Philox4x32-10 block: 4 random words for a 128-bit counter and a 64-bit key.
inline std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kM0) * ctr[0];
    uint64_t p1 = uint64_t(kM1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1],
           uint32_t(p0)};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // Philox blocks consumed so far
  friend bool operator==(const GeneratorState&, const GeneratorState&) = default;
};

/// A stream of random blocks. A draw of n values uses blocks
/// [offset, offset + ceil(n / per_block)) and then advances the offset, so
/// saving and restoring state() replays a sequence exactly.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}

  uint64_t seed() const { return state_.seed; }
  uint64_t offset() const { return state_.offset; }
  GeneratorState state() const { return state_; }
  void set_state(GeneratorState s) { state_ = s; }
  void manual_seed(uint64_t seed) { state_ = {seed, 0}; }

  /// Reserves `blocks` blocks and returns the first one's index.
  uint64_t advance(uint64_t blocks) {
    uint64_t first = state_.offset;
    state_.offset += blocks;
    return first;
  }
  /// The 4 words of block `index` (no state change).
  std::array<uint32_t, 4> block(uint64_t index) const {
    return philox4x32_10({uint32_t(index), uint32_t(index >> 32), 0, 0},
                         {uint32_t(state_.seed), uint32_t(state_.seed >> 32)});
  }
  /// One fresh 64-bit value (advances by one block); for seeding and sampling
  /// single values.
  uint64_t next_u64() {
    auto b = block(advance(1));
    return uint64_t(b[0]) | (uint64_t(b[1]) << 32);
  }

 private:
  GeneratorState state_;
};

}  // namespace kiln
