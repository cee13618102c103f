// PyTorch interop (issue 6 item 6), both directions:
// - state_dicts of small PyTorch models, exported by tools/torch_safetensors.py
//   (tools/goldens/io_interop.py), load by name into the matching kiln models,
//   which then compute PyTorch's outputs (tests/goldens/io_interop.json);
// - files kiln writes read back in PyTorch through the same script with
//   identical tensors: at run time when Debian's python3 with torch and numpy
//   is installed (skipped otherwise: CI has no torch), and always through the
//   committed tests/goldens/io_kiln_written.safetensors, which the golden
//   script checks and this test proves is what kiln writes today.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "kiln/io/safetensors.h"
#include "tests/support/io_testing.h"

namespace kiln::io {
namespace {
using namespace testing;
namespace fs = std::filesystem;

const std::string kGoldens = KILN_GOLDEN_DIR;
const std::string kScript = std::string(KILN_SOURCE_DIR) + "/tools/torch_safetensors.py";
// Debian's interpreter, the one with python3-torch and python3-numpy (a
// python3 earlier on PATH, e.g. a virtualenv, may have neither).
constexpr const char* kPython = "/usr/bin/python3";

// ---------------------------------------------------------------- PyTorch -> kiln

/// tools/goldens/io_interop.py's LstmHead: [B, T, 4] -> (logits [B, T, 3], h, c [2, B, 6]).
struct LstmHead : nn::Module {
  nn::Shared<nn::LSTM> lstm;
  nn::Shared<nn::Linear> head;
  explicit LstmHead(const nn::Init& init)
      : lstm(register_module("lstm", nn::LSTM(4, 6, init, {.num_layers = 2}))),
        head(register_module("head", nn::Linear(6, 3, init))) {}
  std::vector<Tensor> forward(const Tensor& x) const {
    auto [seq, state] = lstm->forward(x);
    return {head(seq), state.h, state.c};
  }
};

/// tools/goldens/io_interop.py's TinyLM: ids [B, T] -> logits [B, T, 11]; the
/// block is torch's TransformerEncoderLayer(norm_first=True) with a causal mask.
struct TinyLM : nn::Module {
  nn::Shared<nn::Embedding> tok;
  nn::Shared<nn::TransformerBlock> block;
  nn::Shared<nn::LayerNorm> ln_f;
  nn::Shared<nn::Linear> head;
  explicit TinyLM(const nn::Init& init)
      : tok(register_module("tok", nn::Embedding(11, 8, init))),
        block(register_module("block", nn::TransformerBlock(8, 2, init, {.dim_feedforward = 16, .causal = true}))),
        ln_f(register_module("ln_f", nn::LayerNorm(Shape{8}))),
        head(register_module("head", nn::Linear(8, 11, init))) {}
  std::vector<Tensor> forward(const Tensor& ids) const { return {head(ln_f(block(tok(ids))))}; }
};

nn::Sequential cnn(Rngs& rngs) {
  return nn::Sequential(nn::Conv2d(3, 4, 3, rngs, {.padding = 1}), nn::BatchNorm2d(4), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), nn::Linear(36, 5, rngs));
}

nn::Sequential autoencoder(Rngs& rngs) {
  return nn::Sequential(nn::Conv2d(2, 4, 3, rngs, {.stride = 2, .padding = 1}), nn::ReLU(),
                        nn::ConvTranspose2d(4, 4, 3, rngs, {.stride = 2, .padding = 1, .output_padding = 1}),
                        nn::Tanh(), nn::ConvTranspose2d(4, 2, 2, rngs, {.groups = 2}));
}

const nlohmann::json& interop_case(const std::string& name) {
  for (const auto& c : golden("io_interop")["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no io_interop case " + name);
}

/// Loads tests/goldens/io_interop_<name>.safetensors into `model` (with the
/// same keys, in the same order, as torch's state_dict) and checks its outputs
/// against torch's: in f32, and after model.to(kF64) against torch's f64 run
/// from the same weights, where only rounding in the last bits may differ.
/// Measured (this machine, oneDNN vs PyTorch 1.13): f32 within 1.2e-7 absolute
/// (6.7e-6 relative), f64 within 2.8e-16 absolute (1.4e-14 relative). One
/// tensor permuted (a running_var, an LSTM bias, a LayerNorm bias, a transposed
/// conv weight) moves the outputs by 8e-3 to 0.18.
template <class Model, class Run>
void expect_matches_torch(const std::string& name, Model& model, Run run) {
  SCOPED_TRACE(name);
  const auto& c = interop_case(name);
  const std::string path = kGoldens + "/io_interop_" + name + ".safetensors";
  nn::StateDict state = load_safetensors(path);
  EXPECT_EQ(state.keys(), c["keys"].get<std::vector<std::string>>());
  EXPECT_EQ(model.state_dict().keys(), state.keys());
  model.load_state_dict(state, {.torch_layout = true});
  auto meta = read_safetensors_metadata(path);
  EXPECT_EQ(meta.at("format"), "pt");
  EXPECT_EQ(meta.at("model"), name);
  EXPECT_EQ(meta.at("source").rfind("torch ", 0), 0u) << meta.at("source");

  model.eval();
  std::vector<Tensor> inputs;
  for (const auto& x : c["inputs"]) inputs.push_back(golden_tensor(x));
  std::vector<Tensor> out = run(model, inputs);
  ASSERT_EQ(out.size(), c["outputs"].size());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i].dtype(), kF32);
    EXPECT_TRUE(all_close(out[i], golden_tensor(c["outputs"][i]), 1e-5, 1e-6)) << "f32 output " << i;
  }

  model.to(kF64);
  for (Tensor& x : inputs)
    if (is_floating(x.dtype())) x = x.to(kF64);
  out = run(model, inputs);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i].dtype(), kF64);
    EXPECT_TRUE(all_close(out[i], golden_tensor(c["outputs_f64"][i]), 1e-12, 1e-14)) << "f64 output " << i;
  }
}

TEST(Interop, CnnWithBatchNormRunningStatsMatchesTorch) {
  Rngs rngs(0);
  nn::Sequential net = cnn(rngs);
  expect_matches_torch("cnn", net,
                       [](nn::Sequential& m, const std::vector<Tensor>& in) { return std::vector{m.forward(in[0])}; });
  // The running statistics and the batch count came from the file.
  auto& bn = dynamic_cast<nn::BatchNorm2d&>(*net.named_children()[1].second);
  EXPECT_EQ(bn.num_batches_tracked.to_vector<int64_t>(), std::vector<int64_t>{3});
  EXPECT_TRUE(
      equal(bn.running_mean.to(kF32), load_safetensors(kGoldens + "/io_interop_cnn.safetensors").at("1.running_mean")));
}

TEST(Interop, LstmWithLinearHeadMatchesTorch) {
  Rngs rngs(0);
  LstmHead model(rngs);
  expect_matches_torch("lstm", model, [](LstmHead& m, const std::vector<Tensor>& in) { return m.forward(in[0]); });
}

TEST(Interop, EmbeddingTransformerLayerNormLmMatchesTorch) {
  Rngs rngs(0);
  TinyLM model(rngs);
  expect_matches_torch("tiny_lm", model, [](TinyLM& m, const std::vector<Tensor>& in) { return m.forward(in[0]); });
}

TEST(Interop, ConvTransposeAutoencoderMatchesTorchWithTorchLayout) {
  Rngs rngs(0);
  nn::Sequential net = autoencoder(rngs);
  expect_matches_torch("autoencoder", net,
                       [](nn::Sequential& m, const std::vector<Tensor>& in) { return std::vector{m.forward(in[0])}; });

  // Without torch_layout the transposed convolutions' weights are PyTorch's
  // [in, out/groups, kH, kW]: refused where the shapes differ, nothing loaded.
  nn::Sequential fresh = autoencoder(rngs);
  const nn::StateDict before = fresh.state_dict();
  EXPECT_KILN_ERROR(fresh.load_state_dict(load_safetensors(kGoldens + "/io_interop_autoencoder.safetensors")),
                    "'4.weight' expects [2, 2, 2, 2] f32 but the state has [4, 1, 2, 2] f32");
  for (const auto& [key, value] : before) EXPECT_TRUE(equal(fresh.state_dict().at(key), value)) << key;
}

// ---------------------------------------------------------------- kiln -> PyTorch

/// Every kiln dtype, special values, 0-d, empty and non-contiguous tensors
/// (a transpose, a strided slice, an expand): tools/goldens/io_interop.py's
/// kiln_written_expected() builds the same in PyTorch.
nn::StateDict kiln_written() {
  constexpr float inf = std::numeric_limits<float>::infinity();
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  nn::StateDict sd;
  sd.insert("f32", tensor<float>({0.5f, -1.25f, inf, -inf, nan, -0.0f}, {2, 3}));
  sd.insert("f32_extremes",
            tensor<float>({std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(), 0.1f}));
  sd.insert("f64", tensor<double>({0.1, -2.5, 1e300, std::numeric_limits<double>::denorm_min()}));
  sd.insert("bf16", tensor<float>({1.0f, -2.5f, 0.15625f, std::ldexp(1.0f, 100)}, {2, 2}).to(kBF16));
  sd.insert("i32", tensor<int32_t>({std::numeric_limits<int32_t>::min(), -1, 0, std::numeric_limits<int32_t>::max()}));
  sd.insert("i64", tensor<int64_t>(
                       {std::numeric_limits<int64_t>::min(), -1, int64_t(1) << 40, std::numeric_limits<int64_t>::max()},
                       {2, 2}));
  sd.insert("u8", tensor<uint8_t>({0, 1, 127, 128, 255}));
  sd.insert("bool", tensor<bool>({true, false, true}));
  sd.insert("scalar", scalar_tensor(3.25));
  sd.insert("empty", zeros({0, 3}));
  sd.insert("empty_i64", zeros({2, 0}, {.dtype = kI64}));
  sd.insert("transposed", arange(0, 6, 1, {.dtype = kF32}).reshape({2, 3}).t());
  sd.insert("every_other", arange(0, 10, 1, {.dtype = kI32}).slice(0, 1, 10, 2));
  sd.insert("expanded", tensor<double>({1.5, -2.0, 4.0}, {1, 3}).expand({2, 3}));
  return sd;
}
const std::map<std::string, std::string> kKilnWrittenMetadata = {{"format", "pt"},
                                                                 {"writer", "kiln tests/io/interop_test.cpp"}};

/// A tensor as golden JSON ({"shape", "dtype", "data"}; NaN and infinities as
/// strings), exact: every kiln float is an exact double, and nlohmann prints
/// doubles so that they read back to the same bits.
nlohmann::json to_json(const Tensor& t) {
  nlohmann::json data = nlohmann::json::array();
  if (is_floating(t.dtype())) {
    for (double v : t.to_vector<double>()) {
      if (std::isnan(v))
        data.push_back("nan");
      else if (std::isinf(v))
        data.push_back(v > 0 ? "inf" : "-inf");
      else
        data.push_back(v);
    }
  } else if (t.dtype() == kBool) {
    for (int64_t v : t.to_vector<int64_t>()) data.push_back(v != 0);
  } else {
    for (int64_t v : t.to_vector<int64_t>()) data.push_back(v);
  }
  return {{"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())},
          {"dtype", std::string(name(t.dtype()))},
          {"data", data}};
}

struct CommandResult {
  int status;
  std::string output;
};

/// Runs a shell command; its exit status and its stdout and stderr together.
CommandResult run_command(const std::string& command) {
  CommandResult r{-1, {}};
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

/// A fresh folder per test under the system's temp dir.
class InteropFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("kiln_interop_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// Whether Debian's python3 lacks torch or numpy (found without importing
  /// them: importing torch takes seconds).
  static bool torch_missing() {
    return run_command(std::string(kPython) +
                       " -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec(\"torch\") and "
                       "u.find_spec(\"numpy\")))'")
               .status != 0;
  }

  fs::path dir_;
};

// The committed kiln-written file is byte for byte what kiln writes today (so
// the golden script's check of it is a check of today's writer), and loads back.
// KILN_REGENERATE_GOLDENS=1 rewrites it (then rerun tools/gen_goldens.py io_interop).
TEST_F(InteropFiles, KilnWrittenGolden) {
  const std::string golden_path = kGoldens + "/io_kiln_written.safetensors";
  const nn::StateDict sd = kiln_written();
  if (std::getenv("KILN_REGENERATE_GOLDENS")) save_safetensors(golden_path, sd, kKilnWrittenMetadata);
  save_safetensors(path("now.safetensors"), sd, kKilnWrittenMetadata);
  ASSERT_TRUE(fs::exists(golden_path)) << golden_path;
  EXPECT_EQ(read_bytes(path("now.safetensors")), read_bytes(golden_path))
      << "kiln's writer changed: rerun with KILN_REGENERATE_GOLDENS=1, then /usr/bin/python3 tools/gen_goldens.py "
         "io_interop (which checks that PyTorch reads the new file)";
  nn::StateDict back = load_safetensors(golden_path);
  ASSERT_EQ(back.keys(), sd.keys());
  for (const auto& [key, value] : sd) {
    EXPECT_TRUE(equal(back.at(key), value)) << key;
    EXPECT_EQ(to_json(back.at(key)), to_json(value)) << key;  // exact, i64 extremes included
  }
  EXPECT_EQ(read_safetensors_metadata(golden_path), kKilnWrittenMetadata);
}

// A file kiln writes now reads back in PyTorch with identical tensors: the
// script compares it with kiln's own values written as JSON.
TEST_F(InteropFiles, TorchReadsKilnFilesWithIdenticalTensors) {
  if (torch_missing())
    GTEST_SKIP() << kPython << " cannot import torch and numpy (Debian python3-torch, python3-numpy); "
                 << "the committed io_kiln_written.safetensors is still checked by KilnWrittenGolden";
  const nn::StateDict sd = kiln_written();
  save_safetensors(path("kiln.safetensors"), sd, kKilnWrittenMetadata);
  nlohmann::json expected = {{"tensors", nlohmann::json::array()}, {"metadata", kKilnWrittenMetadata}};
  for (const auto& [key, value] : sd) expected["tensors"].push_back({{"name", key}, {"value", to_json(value)}});
  std::ofstream(path("expected.json")) << expected.dump();

  const std::string compare_json = std::string(kPython) + " " + quoted(kScript) + " compare-json ";
  CommandResult ok = run_command(compare_json + quoted(path("kiln.safetensors")) + " " + quoted(path("expected.json")));
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("identical: 14 tensors"), std::string::npos) << ok.output;

  // What PyTorch read, saved again by the script, is kiln's file byte for byte.
  CommandResult resave =
      run_command(std::string(kPython) + " -c " +
                  quoted("import sys; sys.path.insert(0, sys.argv[1]); import torch_safetensors as st; "
                         "sd, meta = st.load(sys.argv[2]); st.save(sys.argv[3], sd, meta)") +
                  " " + quoted(std::string(KILN_SOURCE_DIR) + "/tools") + " " + quoted(path("kiln.safetensors")) + " " +
                  quoted(path("torch.safetensors")));
  ASSERT_EQ(resave.status, 0) << resave.output;
  EXPECT_EQ(read_bytes(path("torch.safetensors")), read_bytes(path("kiln.safetensors")));
}

}  // namespace
}  // namespace kiln::io
