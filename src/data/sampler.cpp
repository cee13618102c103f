#include "kiln/data/sampler.h"

#include <fmt/format.h>

#include <numeric>

#include "kiln/core/error.h"
#include "kiln/ops/random.h"

namespace kiln::data {

Sampler::Sampler(int64_t size, bool shuffle, uint64_t seed) : size_(size), shuffle_(shuffle), gen_(seed) {
  KILN_CHECK(size >= 0, "Sampler", "size must be non-negative, got {}", size);
  draw_order();
}

void Sampler::draw_order() {
  epoch_offset_ = gen_.offset();
  order_.resize(size_t(size_));
  if (!shuffle_) {
    std::iota(order_.begin(), order_.end(), int64_t(0));
    return;
  }
  Tensor perm = randperm(size_, gen_);
  const int64_t* p = perm.data<int64_t>();
  order_.assign(p, p + size_);
}

std::vector<int64_t> Sampler::next(int64_t n) {
  KILN_CHECK(n > 0, "Sampler.next", "n must be positive, got {}", n);
  int64_t take = std::min(n, size_ - cursor_);
  std::vector<int64_t> out(order_.begin() + cursor_, order_.begin() + cursor_ + take);
  cursor_ += take;
  return out;
}

void Sampler::next_epoch() {
  ++epoch_;
  cursor_ = 0;
  draw_order();
}

State Sampler::state() const {
  return {{"size", std::to_string(size_)},          {"shuffle", shuffle_ ? "1" : "0"},
          {"seed", std::to_string(gen_.seed())},    {"offset", std::to_string(epoch_offset_)},
          {"epoch", std::to_string(epoch_)},        {"cursor", std::to_string(cursor_)}};
}

void Sampler::load_state(const State& state) {
  constexpr const char* op = "Sampler.load_state";
  for (const auto& [key, value] : state)
    KILN_CHECK(key == "size" || key == "shuffle" || key == "seed" || key == "offset" || key == "epoch" ||
                   key == "cursor",
               op, "unknown key '{}'", key);
  int64_t size = state_i64(state, "size", op);
  int64_t shuffle = state_i64(state, "shuffle", op);
  uint64_t seed = state_u64(state, "seed", op);
  uint64_t offset = state_u64(state, "offset", op);
  int64_t epoch = state_i64(state, "epoch", op);
  int64_t cursor = state_i64(state, "cursor", op);
  KILN_CHECK(size == size_, op, "the state is of a dataset of {} samples, this sampler has {}", size, size_);
  KILN_CHECK(shuffle == int64_t(shuffle_), op, "the state {} shuffle, this sampler {}",
             shuffle ? "does" : "does not", shuffle_ ? "does" : "does not");
  KILN_CHECK(epoch >= 0, op, "epoch is negative ({})", epoch);
  KILN_CHECK(cursor >= 0 && cursor <= size, op, "cursor {} is outside [0, {}]", cursor, size);
  gen_.set_state({seed, offset});
  epoch_ = epoch;
  cursor_ = cursor;
  draw_order();
}

}  // namespace kiln::data
