// Sampler: each epoch a permutation fixed by the seed, resumable mid-epoch
// from its state, with every bad state refused before anything changes.
#include "kiln/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "tests/support/data_testing.h"

namespace kiln::data {
namespace {

std::vector<int64_t> drain(Sampler& s, int64_t batch) {
  std::vector<int64_t> out;
  for (auto idx = s.next(batch); !idx.empty(); idx = s.next(batch)) out.insert(out.end(), idx.begin(), idx.end());
  return out;
}

bool is_permutation_of_range(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != int64_t(i)) return false;
  return true;
}

TEST(Sampler, EachEpochIsANewPermutationFixedByTheSeed) {
  Sampler a(100, true, 3), b(100, true, 3), other(100, true, 4);
  std::vector<int64_t> e0 = drain(a, 7);
  EXPECT_EQ(e0.size(), 100u);
  EXPECT_TRUE(is_permutation_of_range(e0));
  EXPECT_EQ(e0, drain(b, 32));  // the batch size does not change the order
  EXPECT_NE(e0, drain(other, 7));
  std::vector<int64_t> sorted(100);
  std::iota(sorted.begin(), sorted.end(), 0);
  EXPECT_NE(e0, sorted);

  a.next_epoch();
  EXPECT_EQ(a.epoch(), 1);
  EXPECT_EQ(a.cursor(), 0);
  std::vector<int64_t> e1 = drain(a, 7);
  EXPECT_TRUE(is_permutation_of_range(e1));
  EXPECT_NE(e0, e1);
}

TEST(Sampler, SequentialVisitsInOrderAndTheLastBatchIsShort) {
  Sampler s(10, false);
  EXPECT_EQ(s.next(4), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(s.next(4), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(s.next(4), (std::vector<int64_t>{8, 9}));
  EXPECT_TRUE(s.next(4).empty());
  EXPECT_TRUE(Sampler(0).next(1).empty());
  EXPECT_KILN_ERROR(s.next(0), "[Sampler.next] n must be positive, got 0");
  EXPECT_KILN_ERROR(Sampler(-1), "size must be non-negative");
}

TEST(Sampler, StateResumesMidEpochAndAcrossEpochs) {
  Sampler a(50, true, 9);
  drain(a, 8);
  a.next_epoch();
  a.next(8);
  a.next(8);
  State saved = a.state();
  EXPECT_EQ(saved.at("epoch"), "1");
  EXPECT_EQ(saved.at("cursor"), "16");

  Sampler b(50, true, 0);  // another seed: the state carries it
  b.load_state(saved);
  EXPECT_EQ(b.epoch(), 1);
  EXPECT_EQ(b.order(), a.order());
  EXPECT_EQ(drain(b, 8), drain(a, 8));
  a.next_epoch();
  b.next_epoch();
  EXPECT_EQ(drain(b, 5), drain(a, 5));
}

TEST(Sampler, BadStatesAreRefusedAndChangeNothing) {
  Sampler a(20, true, 1);
  a.next(3);
  State good = a.state();
  auto with = [&](const std::string& key, const std::string& value) {
    State s = good;
    s[key] = value;
    return s;
  };
  Sampler b(20, true, 1);
  b.next(5);
  std::vector<int64_t> order = b.order();
  EXPECT_KILN_ERROR(b.load_state(with("size", "21")), "the state is of a dataset of 21 samples, this sampler has 20");
  EXPECT_KILN_ERROR(b.load_state(with("shuffle", "0")), "the state does not shuffle, this sampler does");
  EXPECT_KILN_ERROR(b.load_state(with("cursor", "21")), "cursor 21 is outside [0, 20]");
  EXPECT_KILN_ERROR(b.load_state(with("epoch", "x")), "state 'epoch' is 'x', not an integer");
  EXPECT_KILN_ERROR(b.load_state(with("colour", "red")), "unknown key 'colour'");
  State missing = good;
  missing.erase("offset");
  EXPECT_KILN_ERROR(b.load_state(missing), "state has no 'offset'");
  EXPECT_EQ(b.cursor(), 5);
  EXPECT_EQ(b.order(), order);
}

}  // namespace
}  // namespace kiln::data
