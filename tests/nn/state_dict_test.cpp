#include "kiln/nn/state_dict.h"

#include <gtest/gtest.h>

#include "kiln/ops/creation.h"
#include "tests/support/nn_testing.h"

namespace kiln::nn {
namespace {
using namespace testing;

TEST(StateDict, KeepsInsertionOrderAndFindsByName) {
  StateDict sd;
  sd.insert("z.weight", ones({2}));
  sd.insert("a.bias", zeros({3}));
  sd.insert("m", ones({1}));
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"z.weight", "a.bias", "m"}));
  EXPECT_EQ(sd.at("a.bias").numel(), 3);
  EXPECT_EQ(sd.find("nope"), nullptr);
  sd.insert_or_assign("z.weight", zeros({4}));
  EXPECT_EQ(sd.keys().front(), "z.weight");
  EXPECT_EQ(sd.at("z.weight").numel(), 4);
  EXPECT_TRUE(sd.erase("z.weight"));
  EXPECT_FALSE(sd.erase("z.weight"));
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"a.bias", "m"}));
  EXPECT_EQ(sd.at("m").numel(), 1);
}

TEST(StateDict, DuplicateAndMissingKeysAreErrors) {
  StateDict sd{{"w", ones({1})}};
  EXPECT_KILN_ERROR(sd.insert("w", ones({1})), "[StateDict] duplicate key 'w'");
  EXPECT_KILN_ERROR(sd.at("v"), "[StateDict] no key 'v'");
}

}  // namespace
}  // namespace kiln::nn
