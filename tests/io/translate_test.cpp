// io::translate on a small module: each transform (Identity, Transpose2D,
// Concat, Slice), placeholders, and every check made before anything is copied.
#include "kiln/io/translate.h"

#include <gtest/gtest.h>

#include "tests/support/io_testing.h"

namespace kiln::io {
namespace {
using namespace kiln::testing;

/// Parameters named like a model's: "blocks.<i>.qkv" [6, 4], "blocks.<i>.proj" [4, 3], "q" [2, 4].

struct Block : nn::Module {
  Block() {
    qkv = register_parameter("qkv", zeros({6, 4}));
    proj = register_parameter("proj", zeros({4, 3}));
  }
  nn::Parameter qkv, proj;
};

struct Net : nn::Module {
  Net() {
    for (int i = 0; i < 2; ++i) blocks.push_back(register_module(i == 0 ? "b0" : "b1", Block()));
    q = register_parameter("q", zeros({2, 4}));
  }
  std::vector<nn::Shared<Block>> blocks;
  nn::Parameter q;
};

TranslateMap toy_map() {
  TranslateMap m;
  m.name = "toy";
  m.rules = {{"{b}.qkv", {"{b}.wq", "{b}.wk", "{b}.wv"}, TransformKind::concat, 0},
             {"{b}.proj", {"{b}.proj_t"}, TransformKind::transpose2d},
             {"q", {"b0.fused"}, TransformKind::slice, 0, 2, 4}};
  m.ignore = {"{b}.mask"};
  return m;
}

nn::StateDict toy_source(Generator& gen) {
  nn::StateDict sd;
  for (const char* b : {"b0", "b1"}) {
    std::string p = b;
    sd.insert(p + ".wq", randn({2, 4}, gen));
    sd.insert(p + ".wk", randn({2, 4}, gen));
    sd.insert(p + ".wv", randn({2, 4}, gen, {.dtype = kBF16}));
    sd.insert(p + ".proj_t", randn({3, 4}, gen));
    sd.insert(p + ".mask", ones({3}));
  }
  sd.insert("b0.fused", randn({6, 4}, gen, {.dtype = kF64}));
  return sd;
}

TEST(Translate, EachTransformLoadsWhatItSays) {
  std::string dir = fresh_dir();
  Generator gen(1);
  nn::StateDict sd = toy_source(gen);
  save_safetensors(dir + "/toy.safetensors", sd);
  Net net;
  TranslateReport r = translate(WeightSource::open(dir + "/toy.safetensors"), net, toy_map());
  EXPECT_EQ(r.loaded.size(), 5u);
  EXPECT_TRUE(r.unmapped.empty());
  EXPECT_TRUE(r.missing.empty());
  EXPECT_EQ(r.summary(), "loaded 5 tensors from safetensors; unmapped: -; missing: -");
  for (int i = 0; i < 2; ++i) {
    std::string p = "b" + std::to_string(i);
    Tensor want = cat({sd.at(p + ".wq"), sd.at(p + ".wk"), sd.at(p + ".wv").to(kF32)}, 0);
    EXPECT_TRUE(equal(net.blocks[size_t(i)]->qkv, want));
    EXPECT_TRUE(equal(net.blocks[size_t(i)]->proj, sd.at(p + ".proj_t").t()));
  }
  EXPECT_TRUE(equal(net.q, sd.at("b0.fused").slice(0, 2, 4).to(kF32)));
}

TEST(Translate, EveryProblemIsReportedBeforeAnythingIsCopied) {
  std::string dir = fresh_dir();
  Generator gen(2);
  nn::StateDict sd = toy_source(gen);
  sd.insert("extra", ones({1}));
  nn::StateDict bad;
  for (const auto& [k, v] : sd)
    if (k == "b1.proj_t") bad.insert(k, randn({4, 4}, gen));   // wrong shape
    else if (k != "b1.wk") bad.insert(k, v);                     // missing source
  save_safetensors(dir + "/bad.safetensors", bad);
  Net net;
  nn::StateDict before = net.state_dict();
  try {
    translate(WeightSource::open(dir + "/bad.safetensors"), net, toy_map());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[translate] toy: 3 problem(s), nothing loaded"), std::string::npos) << m;
    EXPECT_NE(m.find("'b1.qkv' needs source 'b1.wk', which the file lacks"), std::string::npos) << m;
    EXPECT_NE(m.find("'b1.proj' is [4, 3] in the model, but Transpose2D of b1.proj_t gives [4, 4]"),
              std::string::npos) << m;
    EXPECT_NE(m.find("the file's extra match no rule"), std::string::npos) << m;
  }
  for (const auto& [k, v] : net.state_dict()) EXPECT_TRUE(equal(v, before.at(k)));

  // Unmapped allowed: only the shape and the missing source remain.
  TranslateOptions lenient{.allow_unmapped = true};
  EXPECT_KILN_ERROR(translate(WeightSource::open(dir + "/bad.safetensors"), net, toy_map(), lenient),
                    "2 problem(s)");

  // Quantized and integer sources are refused by name.
  save_gguf(dir + "/q.gguf", {},
            {{.name = "b0.fused", .quantized = nn::quantize(randn({6, 32}, gen), nn::QuantType::q8_0)}});
  TranslateMap one{.name = "one", .rules = {{"q", {"b0.fused"}, TransformKind::slice, 0, 2, 4}}, .ignore = {}};
  EXPECT_KILN_ERROR(check_translate(WeightSource::open(dir + "/q.gguf"), net, one, {.allow_missing = true}),
                    "source 'b0.fused' is Q8_0, not a floating type kiln converts (F32, F16, BF16, F64); dequantize it first");
  TranslateMap bad_slice{.name = "s", .rules = {{"q", {"b0.fused"}, TransformKind::slice, 0, 5, 9}}, .ignore = {}};
  save_safetensors(dir + "/f.safetensors", nn::StateDict{{"b0.fused", randn({6, 4}, gen)}});
  EXPECT_KILN_ERROR(check_translate(WeightSource::open(dir + "/f.safetensors"), net, bad_slice, {.allow_missing = true}),
                    "Slice [5, 9) of dim 0 of size 6");
  EXPECT_KILN_ERROR(check_translate(WeightSource::open(dir + "/f.safetensors"), net, one),
                    "no rule or source for the model's b0.qkv");
}

}  // namespace
}  // namespace kiln::io
