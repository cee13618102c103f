// models::OnnxModel against PyTorch: an MLP, a CNN and a one-layer GPT
// exported by torch.onnx.export from PyTorch 1.13 (tools/goldens/onnx_models.py)
// match PyTorch's outputs within 1e-5; the module's parameters are the
// initializers under their ONNX names; unsupported operators are named in
// one error at load.
#include <gtest/gtest.h>

#include "kiln/models/onnx_model.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {
using namespace kiln::testing;

std::string golden_file(const std::string& name) { return std::string(KILN_GOLDEN_DIR) + "/" + name; }

void expect_matches_pytorch(const std::string& model, const char* inputs = "inputs", const char* outputs = "outputs") {
  if (!io::onnx_supported()) GTEST_SKIP() << "kiln was built without libonnx-dev";
  OnnxModel m = load_onnx(golden_file("onnx_" + model + ".onnx"));
  const auto& g = golden("onnx_models")[model];
  std::vector<Tensor> in;
  for (const auto& j : g[inputs]) in.push_back(golden_tensor(j));
  NoGradGuard no_grad;
  std::vector<Tensor> got = m.forward(in);
  ASSERT_EQ(got.size(), g[outputs].size());
  for (size_t i = 0; i < got.size(); ++i) {
    Tensor want = golden_tensor(g[outputs][i]);
    ASSERT_EQ(got[i].sizes(), want.sizes());
    EXPECT_TRUE(allclose(to(got[i], kF64), to(want, kF64), 0, 1e-5))
        << model << " output " << i << ": max |diff| " << max(abs(sub(to(got[i], kF64), to(want, kF64)))).item<double>();
  }
}

TEST(OnnxModel, MlpMatchesPyTorch) { expect_matches_pytorch("mlp"); }
TEST(OnnxModel, CnnWithBatchNormAndPoolsMatchesPyTorch) { expect_matches_pytorch("cnn"); }
TEST(OnnxModel, GptBlockMatchesPyTorch) { expect_matches_pytorch("gpt"); }
// The exported graph computes its shapes: another batch and length run too.
TEST(OnnxModel, GptBlockMatchesPyTorchAtAnotherLength) { expect_matches_pytorch("gpt", "inputs_5", "outputs_5"); }

TEST(OnnxModel, InitializersAreParametersUnderTheirOnnxNames) {
  if (!io::onnx_supported()) GTEST_SKIP();
  OnnxModel m = load_onnx(golden_file("onnx_mlp.onnx"));
  EXPECT_EQ(m.opset(), 11);
  ASSERT_EQ(m.inputs().size(), 1u);
  EXPECT_EQ(m.inputs()[0].describe(), "FLOAT [4, 20]");
  auto sd = m.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, v] : sd) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "fc3.bias",
                                            "fc3.weight"}));
  EXPECT_EQ(m.num_parameters(), 20 * 32 + 32 + 32 * 16 + 16 + 16 * 5 + 5);
  // Loading a state dict changes what forward computes (the graph reads the live slots).
  const auto& g = golden("onnx_models")["mlp"];
  Tensor x = golden_tensor(g["inputs"][0]).to(kF32);
  nn::StateDict zero;
  for (const auto& [k, v] : sd) zero.insert(k, zeros_like(v));
  m.load_state_dict(zero);
  NoGradGuard no_grad;
  Tensor y = m.forward({x})[0];
  EXPECT_TRUE(allclose(y, full({4, 5}, 0.5f)));  // sigmoid(0)
}

TEST(OnnxModel, GradientsFlowToTheInitializers) {
  if (!io::onnx_supported()) GTEST_SKIP();
  OnnxModel m = load_onnx(golden_file("onnx_cnn.onnx"));
  Tensor x = golden_tensor(golden("onnx_models")["cnn"]["inputs"][0]).to(kF32);
  sum(m.forward({x})[0]).backward();
  for (const auto& [name, p] : m.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

TEST(OnnxModel, BadInputsAreRefusedNamingTheDeclaration) {
  if (!io::onnx_supported()) GTEST_SKIP();
  OnnxModel m = load_onnx(golden_file("onnx_mlp.onnx"));
  EXPECT_KILN_ERROR(m.forward({}), "takes 1 input (x: FLOAT [4, 20]), got 0");
  EXPECT_KILN_ERROR(m.forward({zeros({4, 21})}), "input 'x' has shape [4, 21], the graph declares FLOAT [4, 20]");
  EXPECT_KILN_ERROR(m.forward({zeros({4, 20}, {.dtype = kF64})}), "input 'x' is f64, the graph declares FLOAT");
  OnnxModel gpt = load_onnx(golden_file("onnx_gpt.onnx"));
  EXPECT_EQ(gpt.inputs()[0].describe(), "INT64 [batch, time]");
  // A token id past the embedding: the failing node is named.
  EXPECT_KILN_ERROR(gpt.forward({full({1, 3}, int64_t(50), {.dtype = kI64})}), "node Gather");
}

TEST(OnnxModel, UnsupportedOperatorsAreListedInOneErrorAtLoad) {
  if (!io::onnx_supported()) GTEST_SKIP();
  io::OnnxModelFile f = io::read_onnx(golden_file("onnx_mlp.onnx"));
  f.nodes[0].op_type = "FancyGemm";
  f.nodes[0].name = "first";
  f.nodes[1].op_type = "Loop";
  f.nodes[2].op_type = "Loop";
  f.nodes[2].name = "";
  f.nodes[3].domain = "com.microsoft";
  try {
    OnnxModel m(f);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("3 unsupported operators (nothing was run)"), std::string::npos) << w;
    EXPECT_NE(w.find("FancyGemm (node 'first')"), std::string::npos) << w;
    EXPECT_NE(w.find("Loop (nodes '/Relu', #2)"), std::string::npos) << w;
    EXPECT_NE(w.find("com.microsoft."), std::string::npos) << w;
    EXPECT_NE(w.find("kiln runs: Abs, Add"), std::string::npos) << w;
  }
  // Attributes kiln cannot honour make a node unsupported too.
  io::OnnxModelFile c = io::read_onnx(golden_file("onnx_cnn.onnx"));
  for (auto& n : c.nodes)
    if (n.op_type == "MaxPool") n.outputs.push_back("indices");
  EXPECT_KILN_ERROR(OnnxModel{c}, "MaxPool with an Indices output");
}

}  // namespace
}  // namespace kiln::models
