#include "kiln/nn/rotary.h"

#include <fmt/format.h>

#include "kiln/core/error.h"

namespace kiln::nn {

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, RotaryEmbeddingOptions opts)
    : head_dim(head_dim), options(opts) {
  KILN_CHECK(head_dim > 0 && head_dim % 2 == 0, "RotaryEmbedding", "head_dim {} must be positive and even",
             head_dim);
  const int64_t rd = options.rotary_dim < 0 ? head_dim : options.rotary_dim;
  KILN_CHECK(rd > 0 && rd % 2 == 0 && rd <= head_dim, "RotaryEmbedding",
             "rotary_dim {} must be even, positive and at most head_dim {}", options.rotary_dim, head_dim);
  KILN_CHECK(options.base > 1, "RotaryEmbedding", "base {} must be > 1", options.base);
}

RotaryOptions RotaryEmbedding::op_options() const {
  return {.base = options.base, .rotary_dim = options.rotary_dim, .interleaved = options.interleaved};
}

void RotaryEmbedding::check_input(const char* op, const Tensor& x, int64_t features) const {
  KILN_CHECK(x.defined(), op, "input is an undefined tensor");
  KILN_CHECK(x.dim() >= 2 && x.size(-1) == features, op,
             "input {} must be [..., T, {}] (head_dim {}{})", to_string(x.shape()), features, head_dim,
             features == head_dim ? "" : fmt::format(" x {} heads", features / head_dim));
}

Tensor RotaryEmbedding::forward(const Tensor& x, int64_t offset) const {
  check_input("RotaryEmbedding", x, head_dim);
  RotaryOptions o = op_options();
  o.offset = offset;
  return rotary_embedding(x, o);
}

Tensor RotaryEmbedding::forward(const Tensor& x, const Tensor& positions) const {
  check_input("RotaryEmbedding", x, head_dim);
  RotaryOptions o = op_options();
  o.positions = positions;
  return rotary_embedding(x, o);
}

Tensor RotaryEmbedding::forward_packed(const Tensor& x, int64_t heads, int64_t offset) const {
  KILN_CHECK(heads > 0, "RotaryEmbedding.forward_packed", "heads {} must be positive", heads);
  check_input("RotaryEmbedding.forward_packed", x, heads * head_dim);
  // [..., T, H*Dh] -> [..., T, H, Dh] -> [..., H, T, Dh] (a view), rotate, and back.
  Shape split = x.shape();
  split[split.size() - 1] = heads;
  split.push_back(head_dim);
  const int64_t d = int64_t(split.size());
  Tensor y = forward(x.reshape(split).transpose(d - 3, d - 2), offset);
  return y.transpose(d - 3, d - 2).reshape(x.shape());
}

std::string RotaryEmbedding::extra_repr() const {
  return fmt::format("head_dim={}, base={}, rotary_dim={}, interleaved={}", head_dim, options.base,
                     options.rotary_dim < 0 ? head_dim : options.rotary_dim, options.interleaved);
}

}  // namespace kiln::nn
