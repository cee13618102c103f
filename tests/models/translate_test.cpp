// io::translate onto kiln's GPT from files PyTorch wrote in nanoGPT's and
// Hugging Face GPT-2's layouts (tools/goldens/io_translate.py): the logits
// match the reference, and a mismatched model is refused untouched.
#include <gtest/gtest.h>

#include "kiln/io/gguf.h"
#include "kiln/io/translate.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {
using namespace kiln::testing;

GPTConfig golden_config() {
  const auto& c = golden("io_translate")["config"];
  return {.vocab_size = c["vocab_size"], .block_size = c["block_size"], .n_layer = c["n_layer"],
          .n_head = c["n_head"], .n_embd = c["n_embd"], .bias = c["bias"]};
}

std::string golden_file(const std::string& name) { return std::string(KILN_GOLDEN_DIR) + "/" + name; }

void expect_reference_logits(const GPT& gpt) {
  const auto& g = golden("io_translate");
  Tensor idx = golden_tensor(g["idx"]);
  Tensor want = golden_tensor(g["logits"]);
  NoGradGuard no_grad;
  Tensor got = gpt.forward(idx);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(allclose(got.to(kF64), want, 0, 1e-5)) << "max |diff| over 1e-5";
}

TEST(Translate, NanoGptLayoutGivesPyTorchsLogits) {
  Rngs rngs(0);
  GPT gpt(golden_config(), rngs);
  io::TranslateReport r =
      io::translate(io::WeightSource::open(golden_file("io_translate_nanogpt.safetensors")), gpt, io::nanogpt_to_gpt());
  EXPECT_TRUE(r.unmapped.empty());
  EXPECT_TRUE(r.missing.empty());
  EXPECT_EQ(r.loaded.size(), gpt.state_dict().size());
  expect_reference_logits(gpt);
}

TEST(Translate, HuggingFaceGpt2LayoutGivesPyTorchsLogits) {
  Rngs rngs(1);
  GPT gpt(golden_config(), rngs);
  io::translate(io::WeightSource::open(golden_file("io_translate_gpt2.safetensors")), gpt, io::gpt2_to_gpt());
  expect_reference_logits(gpt);
}

TEST(Translate, KilnWrittenGgufLoadsThroughTheIdentityMap) {
  Rngs rngs(2);
  GPT a(golden_config(), rngs);
  io::translate(io::WeightSource::open(golden_file("io_translate_nanogpt.safetensors")), a, io::nanogpt_to_gpt());
  std::string dir = fresh_dir();
  std::vector<io::GgufWriteTensor> ts;
  for (const auto& [name, t] : a.state_dict()) ts.push_back({.name = name, .dense = t});
  io::save_gguf(dir + "/gpt.gguf", {{"general.architecture", io::GgufValue::string("kiln-gpt")}}, ts);
  GPT b(golden_config(), rngs);
  io::TranslateReport r = io::translate(io::WeightSource::open(dir + "/gpt.gguf"), b, io::identity_map());
  EXPECT_EQ(r.source_format, "gguf");
  expect_reference_logits(b);
}

TEST(Translate, AMismatchedModelIsRefusedAndLeftUnchanged) {
  Rngs rngs(3);
  GPTConfig c = golden_config();
  c.n_layer = 3;  // one block more than the file has
  c.bias = false;  // and no biases: the file's are unmapped
  GPT gpt(c, rngs);
  nn::StateDict before = gpt.state_dict();
  try {
    io::translate(io::WeightSource::open(golden_file("io_translate_nanogpt.safetensors")), gpt, io::nanogpt_to_gpt());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'transformer.h.2.norm1.weight' needs source 'transformer.h.2.ln_1.weight', which the file lacks"),
              std::string::npos) << m;
    EXPECT_NE(m.find("transformer.h.0.attn.c_attn.bias"), std::string::npos) << m;  // unmapped
  }
  for (const auto& [k, v] : gpt.state_dict()) EXPECT_TRUE(equal(v, before.at(k))) << k;
}

}  // namespace
}  // namespace kiln::models
