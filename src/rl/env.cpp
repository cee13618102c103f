// Spaces and the Transition helper of the environment contract (kiln/rl/env.h).
#include "kiln/rl/env.h"

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/ops/binary.h"

namespace kiln::rl {

Space Space::box(const Shape& shape, std::vector<double> low, std::vector<double> high) {
  Space s{.kind = SpaceKind::Box, .shape = shape, .dtype = kF32};
  const int64_t n = s.numel();
  KILN_CHECK(int64_t(low.size()) == n && int64_t(high.size()) == n, "Space.box",
             "shape {} has {} elements but low has {} and high {}", kiln::to_string(shape), n, low.size(),
             high.size());
  for (int64_t i = 0; i < n; ++i)
    KILN_CHECK(low[i] <= high[i], "Space.box", "low[{}] = {} is above high[{}] = {}", i, low[i], i, high[i]);
  s.low = std::move(low);
  s.high = std::move(high);
  return s;
}

Space Space::discrete(int64_t n) {
  KILN_CHECK(n > 0, "Space.discrete", "n must be positive, got {}", n);
  return Space{.kind = SpaceKind::Discrete, .shape = {}, .dtype = kI64, .n = n};
}

Space Space::binary(const Shape& shape) { return Space{.kind = SpaceKind::Binary, .shape = shape, .dtype = kBool}; }

int64_t Space::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool Space::batch_matches(const Tensor& x) const {
  if (!x.defined() || x.dtype() != dtype || x.dim() != int64_t(shape.size()) + 1) return false;
  for (size_t i = 0; i < shape.size(); ++i)
    if (x.size(int64_t(i) + 1) != shape[i]) return false;
  return true;
}

std::string Space::to_string() const {
  switch (kind) {
    case SpaceKind::Box: return fmt::format("Box({}, {})", kiln::to_string(shape), name(dtype));
    case SpaceKind::Discrete: return fmt::format("Discrete({})", n);
    case SpaceKind::Binary: return fmt::format("Binary({})", kiln::to_string(shape));
  }
  return "Space(?)";
}

Tensor Transition::done() const { return logical_or(terminated, truncated); }

Generator env_generator(uint64_t seed, int64_t index) {
  // Counter (index, "envs"): a tag of its own, so copy i's stream is not the
  // one Rngs derives for call i of a stream with the same seed.
  auto b = philox4x32_10({uint32_t(uint64_t(index)), uint32_t(uint64_t(index) >> 32), 0x656e7673u, 0},
                         {uint32_t(seed), uint32_t(seed >> 32)});
  return Generator(uint64_t(b[0]) | (uint64_t(b[1]) << 32));
}

}  // namespace kiln::rl
