// Golden state dicts of the off-policy tests (tests/rl/dqn_test.cpp,
// sac_test.cpp): a PyTorch module's tensors from tools/goldens/rl_offpolicy.py
// as kiln f32 tensors, under kiln's names (`prefix` + PyTorch's key).
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "kiln/nn/module.h"
#include "tests/support/rl_testing.h"

namespace kiln::testing {

inline nn::StateDict golden_state_dict(const nlohmann::json& j, const std::string& prefix = "") {
  nn::StateDict sd;
  for (const auto& [k, v] : j.items()) sd.insert(prefix + k, golden_tensor(v).to(kF32));
  return sd;
}

/// Every tensor of `j` equals m's `prefix` + key within (rtol, atol).
inline void expect_state_dict(const nn::Module& m, const nlohmann::json& j, const std::string& prefix, double rtol,
                              double atol) {
  nn::StateDict sd = m.state_dict();
  for (const auto& [k, v] : j.items()) {
    SCOPED_TRACE(prefix + k);
    EXPECT_TRUE(all_close(sd.at(prefix + k), golden_tensor(v).to(kF32), rtol, atol));
  }
}

}  // namespace kiln::testing
