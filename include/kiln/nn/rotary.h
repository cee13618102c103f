// RotaryEmbedding (L15): rotary position embedding (RoPE) of per-head features,
// a module over kiln::rotary_embedding (ops/rotary.h). No parameters.
//
//   nn::RotaryEmbedding rope(64);            // head_dim 64, base 10000, half-split pairs
//   q = rope.forward(q);                     // q [B, H, T, 64], positions 0..T-1
//   k = rope.forward(k, /*offset=*/cache_len);  // continuing a sequence (KV cache)
//   x = rope.forward_packed(x, /*heads=*/8); // x [B, T, 8 * 64] (spec 002's flattened layout)
#pragma once

#include <cstdint>
#include <string>

#include "kiln/nn/module.h"
#include "kiln/ops/rotary.h"

namespace kiln::nn {

struct RotaryEmbeddingOptions {
  double base = 10000;
  int64_t rotary_dim = -1;   // rotate the first rotary_dim features (even); -1: all
  bool interleaved = false;  // pairs (2i, 2i + 1) (GPT-J); default (i, i + rd / 2) (GPT-NeoX, LLaMA)
};

class RotaryEmbedding : public Module {
 public:
  explicit RotaryEmbedding(int64_t head_dim, RotaryEmbeddingOptions options = {});

  // x [..., T, head_dim]; row t is at position offset + t.
  Tensor forward(const Tensor& x, int64_t offset = 0) const;
  // x [..., T, head_dim]; row t is at positions[t] (integer [T]).
  Tensor forward(const Tensor& x, const Tensor& positions) const;
  // x [..., T, heads * head_dim]: every head rotated by the same positions.
  Tensor forward_packed(const Tensor& x, int64_t heads, int64_t offset = 0) const;

  std::string extra_repr() const override;

  int64_t head_dim;
  RotaryEmbeddingOptions options;

 private:
  void check_input(const char* op, const Tensor& x, int64_t features) const;
  RotaryOptions op_options() const;
};

}  // namespace kiln::nn
