// Embedding tables (SPECS L11): Embedding, ByteEmbedding, ByteOutputHead.
// Letters: V = num_embeddings, D = embedding_dim, B = batch, T = time.
//
//   nn::Embedding tok(50257, 768, rngs);     // i64 [B, T] -> [B, T, 768]
//   nn::ByteEmbedding bytes(256, rngs);      // u8  [B, T] -> [B, T, 256]
//   nn::ByteOutputHead head(256, rngs);      // [B, T, 256] -> logits [B, T, 256]
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/nn/init.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct EmbeddingOptions {
  // Lookups of this row send it no gradient, and it starts at zeros (PyTorch's
  // padding_idx). In [-V, V); negative counts from the end.
  std::optional<int64_t> padding_idx;
};

// Integer (i64 / i32) [...] -> [..., D]; weight [V, D] drawn from
// init.embedding (N(0, 1), PyTorch's default). The table is decayed by
// AdamW-style weight decay (decay = true), as PyTorch applies weight decay to
// every parameter it is given; set weight.set_decay(false) to exempt it.
// An index outside [0, V) is a kiln::Error.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, const Init& init, EmbeddingOptions options = {});
  Tensor forward(const Tensor& indices) const;
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;  // normalised to [0, V)
  Parameter weight;                     // [V, D]
};

// Bytes to vectors (spec 002): a 256 x D table (init.embedding), u8 [...] ->
// [..., D]; also takes i64 / i32 byte values (range-checked).
class ByteEmbedding : public Module {
 public:
  ByteEmbedding(int64_t embedding_dim, const Init& init);
  Tensor forward(const Tensor& bytes) const;
  std::string extra_repr() const override;

  int64_t embedding_dim;
  Parameter weight;  // [256, D]
};

// Logits over the 256 byte values (spec 002): a Linear D -> 256,
// [..., D] -> [..., 256]. weight [256, D] (fan_in D, init.weight), bias [256]
// (init.bias, no decay); the names are a PyTorch Linear's.
class ByteOutputHead : public Module {
 public:
  ByteOutputHead(int64_t embedding_dim, const Init& init, bool bias = true);
  Tensor forward(const Tensor& x) const;
  std::string extra_repr() const override;

  int64_t embedding_dim;
  Parameter weight;  // [256, D]
  Parameter bias;    // [256]
};

}  // namespace kiln::nn
