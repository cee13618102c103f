// Embedding, ByteEmbedding, ByteOutputHead against PyTorch
// (tests/goldens/nn_layers_embedding.json, nn_layers_byte_*.json), gradchecks, errors.
#include "kiln/nn/embedding.h"

#include <gtest/gtest.h>

#include "tests/nn/layer_testing.h"
#include "tests/nn/parity.h"

namespace kiln::nn {
namespace {
using namespace testing;

TEST(EmbeddingLayers, MatchPyTorch) {
  Rngs rngs(0);
  Embedding e(10, 4, rngs);
  expect_parity(e, parity_case("nn_layers_embedding", "embedding"), [&](const auto& in) { return std::vector{e.forward(in[0])}; });
  // padding_idx: the looked-up padding row gets no gradient.
  Embedding p(10, 4, rngs, {.padding_idx = 0});
  expect_parity(p, parity_case("nn_layers_embedding", "embedding_padding"), [&](const auto& in) { return std::vector{p.forward(in[0])}; });
  Embedding n(6, 3, rngs, {.padding_idx = -1});
  EXPECT_EQ(n.padding_idx, 5);
  expect_parity(n, parity_case("nn_layers_embedding", "embedding_padding_negative"),
                [&](const auto& in) { return std::vector{n.forward(in[0])}; });
  ByteEmbedding b(2, rngs);
  expect_parity(b, parity_case("nn_layers_byte_embedding", "byte_embedding"), [&](const auto& in) {
    EXPECT_EQ(in[0].dtype(), kU8);
    return std::vector{b.forward(in[0])};
  });
  ByteOutputHead h(2, rngs);
  expect_parity(h, parity_case("nn_layers_byte_head", "byte_output_head"), [&](const auto& in) { return std::vector{h.forward(in[0])}; });
}

TEST(EmbeddingLayers, InitShapesAndDecay) {
  Rngs rngs(0);
  Embedding e(1000, 64, rngs, {.padding_idx = 3});
  // N(0, 1) as PyTorch; the padding row starts at zero.
  EXPECT_NEAR(mean(e.weight.value()).item<float>(), 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(mean(square(e.weight.value())).item<float>()), 1.0, 0.01);
  EXPECT_TRUE(equal(e.weight.value().select(0, 3), zeros({64})));
  EXPECT_TRUE(e.weight.decay());
  Tensor idx = tensor<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(e.forward(idx).shape(), (Shape{2, 3, 64}));
  ByteEmbedding b(8, rngs);
  EXPECT_EQ(b.weight.shape(), (Shape{256, 8}));
  // Spec 002: u8 [B, T] -> [B, T, D] f32; [B, T, D] -> [B, T, 256] logits.
  Tensor embedded = b.forward(zeros({2, 5}, {.dtype = kU8}));
  EXPECT_EQ(embedded.shape(), (Shape{2, 5, 8}));
  EXPECT_EQ(embedded.dtype(), kF32);
  ByteOutputHead h(8, rngs);
  EXPECT_EQ(h.forward(embedded).shape(), (Shape{2, 5, 256}));
  EXPECT_EQ(h.forward(embedded).dtype(), kF32);
  EXPECT_TRUE(h.weight.decay());
  EXPECT_FALSE(h.bias.decay());
  EXPECT_EQ(h.state_dict().keys(), (std::vector<std::string>{"weight", "bias"}));
}

TEST(EmbeddingLayers, Gradcheck) {
  Rngs rngs(0);
  Init init = f64_init(rngs);
  // Without padding_idx: with it, the padding row's gradient is zero by design, not d out / d row.
  Embedding e(5, 3, init);
  Tensor idx = tensor<int64_t>({0, 1, 4, 1, 0, 2}, {2, 3});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return e.forward(idx); }, {e.weight.value()});
  ByteEmbedding b(2, init);
  Tensor bytes = tensor<uint8_t>({255, 0, 255}, {3});
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return b.forward(bytes); }, {b.weight.value()});
  ByteOutputHead h(1, init);  // D = 1 keeps the 256 x 256 Jacobians small
  expect_module_gradcheck(h, leaf({1, 1}, 1));
}

TEST(EmbeddingLayers, ReprAndErrors) {
  Rngs rngs(0);
  EXPECT_EQ(Embedding(10, 3, rngs, {.padding_idx = 0}).repr(), "Embedding(10, 3, padding_idx=0)");
  EXPECT_EQ(ByteOutputHead(4, rngs).repr(), "ByteOutputHead(in_features=4, out_features=256, bias=true)");
  EXPECT_KILN_ERROR(Embedding(0, 3, rngs), "[Embedding] num_embeddings 0 and embedding_dim 3 must be positive");
  EXPECT_KILN_ERROR(Embedding(10, 3, rngs, {.padding_idx = 10}), "[Embedding] padding_idx 10 must be in [-10, 10)");
  Embedding e(10, 3, rngs);
  EXPECT_KILN_ERROR(e.forward(tensor<int64_t>({1, 10}, {2})), "[Embedding] [embedding] index 10 is out of range for 10 embeddings");
  EXPECT_KILN_ERROR(e.forward(tensor<int64_t>({-1}, {1})), "[embedding] index -1 is out of range");
  EXPECT_KILN_ERROR(e.forward(ones({2})), "[Embedding] input [2] has dtype f32, expected i64 or i32 indices");
  EXPECT_KILN_ERROR(e.forward(zeros({2}, {.dtype = kU8})), "[Embedding] input [2] has dtype u8");
  ByteEmbedding b(4, rngs);
  EXPECT_KILN_ERROR(b.forward(tensor<int64_t>({256}, {1})), "[ByteEmbedding] [embedding] index 256 is out of range for 256 embeddings");
  EXPECT_KILN_ERROR(b.forward(ones({2})), "[ByteEmbedding] input [2] has dtype f32, expected u8, i64 or i32");
  EXPECT_KILN_ERROR(ByteEmbedding(0, rngs), "[ByteEmbedding] embedding_dim must be positive, got 0");
  ByteOutputHead h(4, rngs);
  EXPECT_KILN_ERROR(h.forward(ones({2, 3})), "[ByteOutputHead] input [2, 3] must end in embedding_dim 4");
  // The op's own padding_idx check.
  EXPECT_KILN_ERROR(embedding(ones({4, 2}), tensor<int64_t>({0}, {1}), 4),
                    "[embedding] padding_idx 4 is out of range for 4 embeddings");
}

}  // namespace
}  // namespace kiln::nn
