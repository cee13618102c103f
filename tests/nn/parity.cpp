#include "tests/nn/parity.h"

#include <map>

namespace kiln::testing {

const nlohmann::json& parity_case(const std::string& file, const std::string& name) {
  for (const auto& c : golden(file)["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no parity case '" + name + "' in " + file + ".json");
}

std::vector<Tensor> parity_inputs(const nlohmann::json& c) {
  std::vector<Tensor> inputs;
  for (const auto& j : c["inputs"]) {
    Tensor x = golden_tensor(j);
    if (is_floating(x.dtype())) x.requires_grad_(true);
    inputs.push_back(x);
  }
  return inputs;
}

void expect_parity(nn::Module& module, const nlohmann::json& c, const ParityRun& run, double rtol, double atol) {
  const std::string name = c["name"];
  nn::StateDict state;
  for (const auto& [key, value] : c["state"].items()) state.insert(key, golden_tensor(value));
  module.load_state_dict(state, {.torch_layout = true});
  module.zero_grad();

  std::vector<Tensor> inputs = parity_inputs(c);
  std::vector<Tensor> outputs = run(inputs);
  ASSERT_EQ(outputs.size(), c["outputs"].size()) << name;
  std::vector<Tensor> diff_outputs, cotangents;
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_TRUE(all_close(outputs[i].detach(), golden_tensor(c["outputs"][i]), rtol, atol)) << name << " output " << i;
    if (!c["cotangents"][i].is_null() && outputs[i].requires_grad()) {
      diff_outputs.push_back(outputs[i]);
      cotangents.push_back(golden_tensor(c["cotangents"][i]));
    }
  }
  if (!diff_outputs.empty()) kiln::backward(diff_outputs, cotangents);

  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& g = c["input_grads"][i];
    if (g.is_null()) continue;
    ASSERT_TRUE(inputs[i].grad().defined()) << name << " input " << i << " got no gradient";
    EXPECT_TRUE(all_close(inputs[i].grad(), golden_tensor(g), rtol, atol)) << name << " grad of input " << i;
  }
  // Parameter gradients by key, in kiln's layout.
  std::map<std::string, nn::Module*> owners;
  for (const auto& [path, m] : module.named_modules()) owners[path] = m;
  std::map<std::string, nn::Parameter> params;
  for (const auto& [path, p] : module.named_parameters()) params[path] = p;
  for (const auto& [key, g] : c["param_grads"].items()) {
    ASSERT_TRUE(params.count(key)) << name << ": kiln has no parameter " << key;
    const size_t dot = key.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : key.substr(0, dot);
    const std::string local = dot == std::string::npos ? key : key.substr(dot + 1);
    Tensor expect = owners.at(owner)->from_torch(local, golden_tensor(g));
    Tensor got = params[key].grad();
    ASSERT_TRUE(got.defined()) << name << ": no gradient for " << key;
    EXPECT_TRUE(all_close(got, expect.contiguous(), rtol, atol)) << name << " grad of " << key;
  }
}

}  // namespace kiln::testing
