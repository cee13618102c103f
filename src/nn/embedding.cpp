// Embedding, ByteEmbedding, ByteOutputHead around ops/index (embedding) and ops/linalg (linear).
#include "kiln/nn/embedding.h"

#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"
#include "src/nn/layer_error.h"

namespace kiln::nn {

namespace {
void check_indices(const char* layer, const Tensor& idx, bool allow_u8) {
  KILN_CHECK(idx.defined(), layer, "input is undefined");
  const DType t = idx.dtype();
  KILN_CHECK(t == kI64 || t == kI32 || (allow_u8 && t == kU8), layer, "input {} has dtype {}, expected {}",
             to_string(idx.shape()), name(t), allow_u8 ? "u8, i64 or i32" : "i64 or i32 indices");
}
}  // namespace

Embedding::Embedding(int64_t V, int64_t D, const Init& init, EmbeddingOptions options)
    : num_embeddings(V), embedding_dim(D) {
  KILN_CHECK(V > 0 && D > 0, "Embedding", "num_embeddings {} and embedding_dim {} must be positive", V, D);
  if (options.padding_idx) {
    int64_t p = *options.padding_idx;
    KILN_CHECK(p >= -V && p < V, "Embedding", "padding_idx {} must be in [-{}, {}) (num_embeddings {})", p, V, V, V);
    padding_idx = p < 0 ? p + V : p;
  }
  weight = register_parameter("weight", init.make(init.embedding, {V, D}, {V, D}, /*decay=*/true));
  if (padding_idx) {
    // The padding row starts at zero (PyTorch): written in place on the new leaf.
    NoGradGuard no_grad;
    zero_(weight.value().select(0, *padding_idx));
  }
}

Tensor Embedding::forward(const Tensor& indices) const {
  check_indices("Embedding", indices, false);
  // Mixed precision: the gathered rows in the compute dtype (the gather and its
  // scatter-add backward stay in the weight's dtype).
  return in_layer("Embedding", [&] { return to_compute(embedding(weight, indices, padding_idx)); });
}

std::string Embedding::extra_repr() const {
  std::string s = fmt::format("{}, {}", num_embeddings, embedding_dim);
  if (padding_idx) s += fmt::format(", padding_idx={}", *padding_idx);
  return s;
}

ByteEmbedding::ByteEmbedding(int64_t D, const Init& init) : embedding_dim(D) {
  KILN_CHECK(D > 0, "ByteEmbedding", "embedding_dim must be positive, got {}", D);
  weight = register_parameter("weight", init.make(init.embedding, {256, D}, {256, D}, /*decay=*/true));
}

Tensor ByteEmbedding::forward(const Tensor& bytes) const {
  check_indices("ByteEmbedding", bytes, true);
  // u8 values index the 256 rows directly; the op takes i64/i32 indices.
  return in_layer("ByteEmbedding", [&] { return to_compute(embedding(weight, bytes.dtype() == kU8 ? bytes.to(kI32) : bytes)); });
}

std::string ByteEmbedding::extra_repr() const { return fmt::format("256, {}", embedding_dim); }

ByteOutputHead::ByteOutputHead(int64_t D, const Init& init, bool with_bias) : embedding_dim(D) {
  KILN_CHECK(D > 0, "ByteOutputHead", "embedding_dim must be positive, got {}", D);
  weight = register_parameter("weight", init.make_weight({256, D}, {D, 256}));
  if (with_bias) bias = register_parameter("bias", init.make_bias({256}, {D, 256}));
}

Tensor ByteOutputHead::forward(const Tensor& x) const {
  KILN_CHECK(x.defined(), "ByteOutputHead", "input is undefined");
  KILN_CHECK(x.dim() >= 1 && x.shape().back() == embedding_dim, "ByteOutputHead",
             "input {} must end in embedding_dim {}", to_string(x.shape()), embedding_dim);
  return in_layer("ByteOutputHead", [&] { return linear(to_compute(x), to_compute(weight), to_compute(bias)); });
}

std::string ByteOutputHead::extra_repr() const {
  return fmt::format("in_features={}, out_features=256, bias={}", embedding_dim, bias.defined());
}

}  // namespace kiln::nn
