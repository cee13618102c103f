// Rngs: named random streams (spec 000 "Randomness and compilation"):
// `Rngs rngs{{"params", 0}, {"dropout", 1}}; Generator g = rngs.next("params");`
// Each next(name) returns a fresh, independent Generator and advances that
// stream; a missing name is an error. state()/set_state() checkpoint it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "kiln/core/generator.h"

namespace kiln {

class Rngs {
 public:
  struct Stream {
    uint64_t seed = 0;
    uint64_t count = 0;  // next() calls so far
    friend bool operator==(const Stream&, const Stream&) = default;
  };

  Rngs() = default;
  Rngs(std::initializer_list<std::pair<const std::string, uint64_t>> seeds);
  /// Rngs(42) is Rngs{{"params", 42}}: the default stream name.
  explicit Rngs(uint64_t params_seed);

  /// A new generator for stream `name`, derived from (seed, count); throws
  /// "[Rngs] no stream named 'x' (streams: params, dropout)".
  Generator next(const std::string& name);
  bool has(const std::string& name) const { return streams_.count(name) != 0; }
  /// Adds or reseeds a stream.
  void add(const std::string& name, uint64_t seed) { streams_[name] = {seed, 0}; }

  const std::map<std::string, Stream>& state() const { return streams_; }
  void set_state(std::map<std::string, Stream> state) { streams_ = std::move(state); }

 private:
  std::map<std::string, Stream> streams_;
};

}  // namespace kiln
