// What a test of layer nn may use: the nn headers, and the modules' helpers, over autograd's
// (tests/support/autograd_testing.h); nothing above nn (tools/check_layers.py
// holds each layer's tests to it).
#pragma once

#include <string>
#include <vector>

#include "kiln/nn/activation.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/norm.h"
#include "kiln/nn/parameter.h"
#include "kiln/nn/pool.h"
#include "kiln/nn/recurrent.h"
#include "kiln/nn/rotary.h"
#include "kiln/nn/state_dict.h"
#include "kiln/nn/transforms.h"
#include "kiln/nn/upsample.h"
#include "tests/support/autograd_testing.h"

namespace kiln::testing {

/// A module's state-dict keys in order (to compare with PyTorch's layout).
inline std::vector<std::string> state_dict_keys(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m.state_dict()) out.push_back(k);
  return out;
}

}  // namespace kiln::testing
