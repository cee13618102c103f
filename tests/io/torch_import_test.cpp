// A PyTorch state_dict exported to safetensors (tools/goldens/nn_basic.py) loads
// into the same kiln structure by name and computes the same outputs.
#include <gtest/gtest.h>

#include "kiln/io/safetensors.h"
#include "tests/support/io_testing.h"

namespace kiln::io {
namespace {
using namespace testing;

TEST(TorchImport, SafetensorsStateDictLoadsByNameAndGivesTheSameOutputs) {
  const std::string path = std::string(KILN_GOLDEN_DIR) + "/nn_basic_mlp.safetensors";
  Rngs rngs(0);
  nn::Sequential net(nn::Linear(6, 8, rngs), nn::ReLU(), nn::Linear(8, 3, rngs));
  nn::StateDict state = load_safetensors(path);
  EXPECT_EQ(state.keys(), net.state_dict().keys());
  net.load_state_dict(state, {.torch_layout = true});
  const auto& exported = golden("nn_basic")["exported"];
  EXPECT_TRUE(all_close(net.forward(golden_tensor(exported["input"])), golden_tensor(exported["output"])));
  EXPECT_EQ(read_safetensors_metadata(path).at("source").rfind("torch ", 0), 0u);

  // A different structure is refused by name, and nothing is loaded.
  nn::Sequential wider(nn::Linear(6, 9, rngs), nn::ReLU(), nn::Linear(9, 3, rngs));
  const nn::StateDict before = wider.state_dict();
  EXPECT_KILN_ERROR(wider.load_state_dict(state), "'0.weight' expects [9, 6] f32 but the state has [8, 6] f32");
  for (const auto& [key, value] : before) EXPECT_TRUE(equal(wider.state_dict().at(key), value)) << key;
}

}  // namespace
}  // namespace kiln::io
