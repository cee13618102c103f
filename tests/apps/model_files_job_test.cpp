// `kiln convert` / `kiln inspect` / `kiln generate` on model files: a tiny
// GPT trained by the lm job, converted to GGUF (f32, Q8_0, Q4_0), runs with
// the same greedy text at f32 and logits close to the checkpoint's when
// quantized; inspect lists every format; bad conversions are named errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "apps/kiln/eval_lm.h"
#include "apps/kiln/generate.h"
#include "apps/kiln/lm.h"
#include "apps/kiln/model_files.h"
#include "kiln/core/grad_mode.h"
#include "kiln/io/gguf.h"
#include "kiln/io/onnx.h"
#include "kiln/io/safetensors.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

std::string train_tiny(const std::string& dir, LmResult* result = nullptr) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "ROMEO:\nBut soft, what light through yonder window breaks?\n\n";
  std::ofstream(dir + "/text.txt", std::ios::binary) << text;
  std::ostringstream log;
  LmResult r = train_lm({.data = dir + "/text.txt", .n_layer = 1, .n_head = 2, .n_embd = 32, .block_size = 16, .iters = 150,
            .batch_size = 8, .lr = 1e-2, .min_lr = 1e-3, .warmup = 2, .eval_interval = 150, .eval_iters = 2,
            .out = dir + "/run", .log = &log, .tty = false});
  if (result) *result = r;
  return dir + "/run";
}

double max_logit_diff(const LanguageModel& a, const LanguageModel& b) {
  Tensor idx = Tensor::empty({1, 16}, kI64);
  for (int64_t i = 0; i < 16; ++i) idx.data<int64_t>()[i] = i % a.config.vocab_size;
  NoGradGuard no_grad;
  Tensor x = a.model->forward(idx), y = b.model->forward(idx);
  double d = 0;
  for (int64_t i = 0; i < x.numel(); ++i) d = std::max(d, double(std::fabs(x.data<float>()[i] - y.data<float>()[i])));
  return d;
}

// `kiln eval lm` measures exactly train_lm's final val loss (same split,
// windows and batches), so a quantized file's rise over the checkpoint is the
// quantization's own cost.
TEST(ModelFilesJob, EvalLmReproducesTheTrainingValLossAndMeasuresQuantizedFiles) {
  std::string dir = kiln::testing::fresh_dir();
  LmResult trained;
  std::string run = train_tiny(dir, &trained);
  std::ostringstream log;
  EvalLmOptions e{.checkpoint = run, .data = dir + "/text.txt", .batches = 2, .batch_size = 8, .out = &log};
  EvalLmResult f32 = eval_lm(e);
  EXPECT_NEAR(f32.val_loss, trained.val_loss, 1e-6);
  EXPECT_EQ(f32.weights, "f32");
  EXPECT_EQ(f32.quantized_matrices, 0);
  std::map<std::string, double> loss;
  for (const char* q : {"", "q8_0", "q4_0"}) {
    std::string out = dir + "/model" + q + ".gguf";
    convert_file({.input = run, .output = out, .quantize = q, .out = &log});
    e.checkpoint = out;
    EvalLmResult r = eval_lm(e);
    loss[q] = r.val_loss;
    EXPECT_EQ(r.weights, *q ? q : "f32");
    EXPECT_EQ(r.quantized_matrices, *q ? 5 : 0);  // in_proj, out_proj, linear1, linear2, the tied head
  }
  EXPECT_EQ(loss[""], f32.val_loss);  // the f32 GGUF is the checkpoint
  std::printf("val loss f32 %.4f, q8_0 %+.4f, q4_0 %+.4f\n", f32.val_loss, loss["q8_0"] - f32.val_loss,
              loss["q4_0"] - f32.val_loss);
  EXPECT_NE(loss["q8_0"], f32.val_loss);
  EXPECT_LT(std::fabs(loss["q8_0"] - f32.val_loss), 0.01);
  EXPECT_LT(std::fabs(loss["q4_0"] - f32.val_loss), 0.15);
  EXPECT_NE(log.str().find("val loss"), std::string::npos);
  EXPECT_KILN_ERROR(eval_lm({.checkpoint = run, .data = dir + "/missing.txt", .out = &log}), "cannot read");
  EXPECT_KILN_ERROR(eval_lm({.checkpoint = run, .data = dir + "/text.txt", .batches = 0, .out = &log}), "--batches");
}

TEST(ModelFilesJob, ConvertsALanguageModelToGgufThatGenerates) {
  std::string dir = kiln::testing::fresh_dir();
  std::string run = train_tiny(dir);
  std::ostringstream log;
  for (const char* q : {"", "q8_0", "q4_0"}) {
    std::string out = dir + "/model" + q + ".gguf";
    convert_file({.input = run, .output = out, .quantize = q, .out = &log});
  }
  LanguageModel ref = load_lm(run);
  LanguageModel f32 = load_lm_gguf(dir + "/model.gguf");
  LanguageModel q8 = load_lm_gguf(dir + "/modelq8_0.gguf");
  LanguageModel q4 = load_lm_gguf(dir + "/modelq4_0.gguf");
  EXPECT_EQ(max_logit_diff(ref, f32), 0.0);
  double d8 = max_logit_diff(ref, q8), d4 = max_logit_diff(ref, q4);
  EXPECT_GT(d8, 0.0);
  EXPECT_LT(d8, 0.1);
  EXPECT_LT(d4, 1.0);
  EXPECT_LT(d8, d4);
  // The quantized file is smaller and its Linear layers use the codes.
  EXPECT_LT(std::filesystem::file_size(dir + "/modelq4_0.gguf"), std::filesystem::file_size(dir + "/modelq8_0.gguf"));
  EXPECT_LT(std::filesystem::file_size(dir + "/modelq8_0.gguf"), std::filesystem::file_size(dir + "/model.gguf"));
  int quantized_layers = 0;
  for (auto& [name, m] : q8.model->named_modules())
    if (auto* l = dynamic_cast<nn::Linear*>(m); l && l->quantized) ++quantized_layers;
  EXPECT_EQ(quantized_layers, 3);  // out_proj, linear1, linear2
  for (const LanguageModel* q : {&q8, &q4}) {
    // The packed in-projection and the tied head multiply by codes too.
    auto& mha = *q->model->h[0]->self_attn;
    ASSERT_TRUE(mha.in_proj_quantized);
    ASSERT_TRUE(q->model->lm_head->quantized);
    // No f32 copies of the file's quantized matrices: each is one shared zero.
    EXPECT_TRUE(nn::is_released(mha.in_proj_weight.value()));
    EXPECT_TRUE(nn::is_released(q->model->h[0]->linear1->weight.value()));
    EXPECT_EQ(q->model->h[0]->linear1->weight.value().storage()->nbytes(), sizeof(float));
    // The tied table stays f32: the embedding reads it.
    EXPECT_FALSE(nn::is_released(q->model->wte->weight.value()));
  }

  // Greedy generation from the f32 GGUF equals the checkpoint's; Q8 runs too.
  std::ostringstream o1, o2, o3;
  GenerateTextOptions g{.checkpoint = run, .prompt = "ROMEO:", .max_new_tokens = 20, .temperature = 0, .out = &o1};
  std::string a = generate_text(g);
  g.checkpoint = dir + "/model.gguf";
  g.out = &o2;
  EXPECT_EQ(generate_text(g), a);
  g.checkpoint = dir + "/modelq8_0.gguf";
  g.out = &o3;
  EXPECT_EQ(generate_text(g).size(), 20u);

  // inspect: GGUF with its metadata, and the checkpoint as a kiln checkpoint.
  std::ostringstream i1, i2;
  inspect_file({.path = dir + "/modelq8_0.gguf", .out = &i1});
  EXPECT_NE(i1.str().find("GGUF version 3"), std::string::npos) << i1.str();
  EXPECT_NE(i1.str().find("kiln.quantization (STRING) = \"q8_0\""), std::string::npos) << i1.str();
  EXPECT_NE(i1.str().find("tensor transformer.h.0.linear1.weight Q8_0 [128, 32]"), std::string::npos) << i1.str();
  std::string ckpt;
  for (const auto& e : std::filesystem::recursive_directory_iterator(run))
    if (e.path().extension() == ".safetensors") ckpt = e.path().string();
  ASSERT_FALSE(ckpt.empty());
  inspect_file({.path = ckpt, .out = &i2});
  EXPECT_NE(i2.str().find(": kiln-checkpoint, "), std::string::npos) << i2.str();
  EXPECT_NE(i2.str().find("config = {"), std::string::npos) << i2.str();
}

TEST(ModelFilesJob, ConvertsBetweenSafetensorsAndGguf) {
  std::string dir = kiln::testing::fresh_dir();
  Generator gen(1);
  nn::StateDict sd{{"fc.weight", randn({8, 64}, gen)}, {"fc.bias", randn({8}, gen)}, {"wte.weight", randn({5, 32}, gen)}};
  io::save_safetensors(dir + "/m.safetensors", sd, {{"format", "pt"}});
  std::ostringstream log;
  convert_file({.input = dir + "/m.safetensors", .output = dir + "/m.gguf", .out = &log});
  convert_file({.input = dir + "/m.gguf", .output = dir + "/back.safetensors", .out = &log});
  nn::StateDict back = io::load_safetensors(dir + "/back.safetensors");
  for (const auto& [k, v] : sd) EXPECT_TRUE(kiln::testing::equal(back.at(k), v)) << k;
  EXPECT_EQ(io::read_safetensors_metadata(dir + "/back.safetensors").at("format"), "pt");

  convert_file({.input = dir + "/m.safetensors", .output = dir + "/q.gguf", .quantize = "q4_0", .out = &log});
  io::GgufFile g = io::GgufFile::open(dir + "/q.gguf");
  EXPECT_EQ(io::gguf_type_name(g.tensor("fc.weight").type), "Q4_0");
  EXPECT_EQ(io::gguf_type_name(g.tensor("wte.weight").type), "F32");  // embeddings stay f32
  EXPECT_EQ(io::gguf_type_name(g.tensor("fc.bias").type), "F32");

  EXPECT_KILN_ERROR(convert_file({.input = dir + "/m.safetensors", .output = dir + "/x.safetensors", .quantize = "q8_0"}),
                    "needs a .gguf output");
  EXPECT_KILN_ERROR(convert_file({.input = dir + "/m.safetensors", .output = dir + "/x.bin"}), "must end in .gguf");
  EXPECT_KILN_ERROR(load_lm_gguf(dir + "/q.gguf"), "not a language model of `kiln convert`");
  EXPECT_KILN_ERROR(inspect_file({.path = dir + "/none.gguf"}), "cannot read it");
}

TEST(ModelFilesJob, InspectsAndConvertsOnnxModels) {
  if (!io::onnx_supported()) GTEST_SKIP() << "built without libonnx-dev";
  const std::string onnx = std::string(KILN_GOLDEN_DIR) + "/onnx_mlp.onnx";
  std::ostringstream info;
  inspect_file({.path = onnx, .out = &info});
  const std::string text = info.str();
  for (const char* part : {": ONNX, ir_version ", "opset ai.onnx 11", "producer pytorch 1.13", "input x FLOAT [4, 20]",
                           "output y FLOAT [4, 5]", "op Gemm x3", "op Relu x1", "kiln runs every operator",
                           "tensor fc1.weight FLOAT [32, 20] "})
    EXPECT_NE(text.find(part), std::string::npos) << part << " not in:\n" << text;

  std::string dir = kiln::testing::fresh_dir();
  std::ostringstream log;
  convert_file({.input = onnx, .output = dir + "/mlp.safetensors", .out = &log});
  nn::StateDict back = io::load_safetensors(dir + "/mlp.safetensors");
  io::OnnxModelFile f = io::read_onnx(onnx);
  EXPECT_EQ(back.size(), f.initializers.size());
  for (const auto& [k, v] : f.initializers) EXPECT_TRUE(kiln::testing::equal(back.at(k), v)) << k;
  EXPECT_EQ(io::read_safetensors_metadata(dir + "/mlp.safetensors").at("onnx.opset"), "11");
}

}  // namespace
}  // namespace kiln::app
