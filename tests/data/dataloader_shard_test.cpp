// DataLoader rank sharding (docs/distributed.md): W loaders of batch B, one
// per rank, hand out disjoint slices of the same global batches that one
// loader of batch B * W hands out, epoch after epoch; their state resumes in
// a loader of another world size with the same global batch.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/support/data_testing.h"

namespace kiln {
namespace {

std::shared_ptr<data::TensorDataset> numbered(int64_t n) {
  std::vector<int64_t> ids(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = i;
  Tensor x = tensor(ids);
  return std::make_shared<data::TensorDataset>(x, x);
}

std::vector<int64_t> ids(const data::Batch& b) { return b.input.contiguous().to_vector<int64_t>(); }

TEST(DataLoaderShard, RanksSplitTheGlobalBatchesOfOneProcess) {
  auto set = numbered(23);
  for (bool drop_last : {false, true}) {
    data::DataLoader one(set, {.batch_size = 6, .shuffle = true, .seed = 9, .drop_last = drop_last, .prefetch = 0});
    data::DataLoader r0(set, {.batch_size = 3, .shuffle = true, .seed = 9, .drop_last = drop_last, .prefetch = 2,
                              .rank = 0, .world_size = 2});
    data::DataLoader r1(set, {.batch_size = 3, .shuffle = true, .seed = 9, .drop_last = drop_last, .prefetch = 0,
                              .rank = 1, .world_size = 2});
    EXPECT_EQ(r0.size(), one.size());
    EXPECT_EQ(r0.global_batch_size(), 6);
    EXPECT_EQ(r1.samples_per_epoch(), one.samples_per_epoch());
    for (int epoch = 0; epoch < 3; ++epoch) {
      if (epoch > 0) {
        one.next_epoch();
        r0.next_epoch();
        r1.next_epoch();
      }
      std::vector<int64_t> seen;
      for (int64_t j = 0; j < one.size(); ++j) {
        auto a = ids(*r0.next()), b = ids(*r1.next()), all = ids(*one.next());
        // Full batches: 3 and 3; the short last one (23 = 3 * 6 + 5): 2 and 3.
        EXPECT_EQ(a.size(), all.size() / 2);
        std::vector<int64_t> joined = a;
        joined.insert(joined.end(), b.begin(), b.end());
        EXPECT_EQ(joined, all) << "epoch " << epoch << " batch " << j;
        seen.insert(seen.end(), joined.begin(), joined.end());
      }
      EXPECT_FALSE(r0.next().has_value());
      std::sort(seen.begin(), seen.end());
      EXPECT_TRUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end());  // disjoint
      EXPECT_EQ(int64_t(seen.size()), one.samples_per_epoch());
    }
  }
}

TEST(DataLoaderShard, StateResumesUnderAnotherWorldSizeWithTheSameGlobalBatch) {
  auto set = numbered(40);
  data::DataLoader r1(set, {.batch_size = 4, .seed = 3, .rank = 1, .world_size = 2});
  r1.next_epoch();  // epoch 1
  r1.next();
  r1.next();
  State s = r1.state();
  EXPECT_EQ(s.at("batch_size"), "8");
  EXPECT_EQ(s.at("cursor"), "16");
  // One process of batch 8 continues with the same global batches.
  data::DataLoader one(set, {.batch_size = 8, .seed = 3});
  one.load_state(s);
  data::DataLoader fresh(set, {.batch_size = 8, .seed = 3});
  fresh.next_epoch();
  fresh.next();
  fresh.next();
  EXPECT_EQ(one.epoch(), 1);
  EXPECT_EQ(ids(*one.next()), ids(*fresh.next()));
  // Four ranks of batch 2 as well; batch 4 alone is refused, naming both.
  data::DataLoader r3(set, {.batch_size = 2, .seed = 3, .rank = 3, .world_size = 4});
  r3.load_state(s);
  EXPECT_EQ(r3.position(), 2);
  data::DataLoader wrong(set, {.batch_size = 4, .seed = 3});
  try {
    wrong.load_state(s);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the state is of batch_size 8, this loader's is 4"), std::string::npos)
        << e.what();
  }
}

TEST(DataLoaderShard, BadRankOrWorldSizeIsAnError) {
  auto set = numbered(10);
  EXPECT_THROW(data::DataLoader(set, {.rank = 2, .world_size = 2}), Error);
  EXPECT_THROW(data::DataLoader(set, {.rank = -1, .world_size = 2}), Error);
  EXPECT_THROW(data::DataLoader(set, {.world_size = 0}), Error);
  EXPECT_THROW(data::DataLoader(set, {.batch_size = 6, .drop_last = true, .world_size = 2}), Error);
}

}  // namespace
}  // namespace kiln
