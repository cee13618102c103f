// Named random streams.
#include "kiln/core/rngs.h"

#include "kiln/core/error.h"

namespace kiln {

Rngs::Rngs(std::initializer_list<std::pair<const std::string, uint64_t>> seeds) {
  for (const auto& [name, seed] : seeds) streams_[name] = {seed, 0};
}

Rngs::Rngs(uint64_t params_seed) { streams_["params"] = {params_seed, 0}; }

Generator Rngs::next(const std::string& name) {
  auto it = streams_.find(name);
  if (it == streams_.end()) {
    std::string names;
    for (const auto& [n, s] : streams_) names += (names.empty() ? "" : ", ") + n;
    KILN_FAIL("Rngs", "no stream named '{}' (streams: {})", name, names.empty() ? "none" : names);
  }
  Stream& s = it->second;
  // The derived seed is one Philox block keyed by the stream seed, at counter
  // (count, 0x6b696c6e): independent of every other stream and call.
  auto b = philox4x32_10({uint32_t(s.count), uint32_t(s.count >> 32), 0x6b696c6eu, 0},
                         {uint32_t(s.seed), uint32_t(s.seed >> 32)});
  ++s.count;
  return Generator(uint64_t(b[0]) | (uint64_t(b[1]) << 32));
}

}  // namespace kiln
