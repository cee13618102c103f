// Parity with PyTorch for nn layers: a golden case (tools/goldens/nn_util.py)
// holds a PyTorch module's state_dict, inputs, outputs, cotangents and every
// gradient. expect_parity loads the state into a kiln module (PyTorch layout),
// runs it, backpropagates the same cotangents and compares outputs, input
// gradients and parameter gradients (by state-dict key).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tests/support/nn_testing.h"

namespace kiln::testing {

// The case named `name` in tests/goldens/<file>.json.
const nlohmann::json& parity_case(const std::string& file, const std::string& name);

// The case's inputs: floating ones are leaves that require grad.
std::vector<Tensor> parity_inputs(const nlohmann::json& c);

using ParityRun = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// Loads c["state"] into `module` (LoadOptions::torch_layout), runs `run` on the
// case's inputs and checks everything against PyTorch.
void expect_parity(nn::Module& module, const nlohmann::json& c, const ParityRun& run, double rtol = 1e-4,
                   double atol = 1e-5);

}  // namespace kiln::testing
