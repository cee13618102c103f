// Stateful: an object whose state rides in a checkpoint as a flat map of
// strings (a data loader's order, a callback's counters). In core, not io, so
// that the layers below io's checkpoints (data's loader and sampler) can be
// checkpointed without seeing io or nn (docs/architecture.md, Layers).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace kiln {

/// The state of an object that rides in a checkpoint's metadata: a flat map
/// of strings, so any value (a u64 seed, a double printed with %.17g)
/// round-trips exactly.
using State = std::map<std::string, std::string>;

/// An object a checkpoint can carry (io::Checkpoint::state). load_state must
/// check the whole state before changing anything, throwing a kiln::Error
/// that names the key.
class Stateful {
 public:
  virtual ~Stateful() = default;
  virtual State state() const = 0;
  virtual void load_state(const State& state) = 0;
};

/// Typed reads of a State's values, for load_state implementations: throw
/// "[op] state has no 'cursor'" or "[op] state 'cursor' is 'x', not an integer".
/// Write values with std::to_string or fmt::format("{}", x) (a double's
/// shortest exact form).
int64_t state_i64(const State& state, const std::string& key, const char* op);
uint64_t state_u64(const State& state, const std::string& key, const char* op);
double state_f64(const State& state, const std::string& key, const char* op);

}  // namespace kiln
