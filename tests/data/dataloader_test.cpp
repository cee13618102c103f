// DataLoader and TensorDataset: batches in the sampler's order, resumable bit
// for bit mid-epoch with and without the prefetch thread, reused buffers that
// are never overwritten while held, and every bad input refused by name.
#include "kiln/data/dataloader.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <set>

#include "tests/support/data_testing.h"

namespace kiln::data {
namespace {

// Example i: input [2, 3] f32 with values i*10 + j (j = 0..5), target [] i64 = i.
std::shared_ptr<TensorDataset> numbered(int64_t n) {
  std::vector<float> in(size_t(n) * 6);
  std::vector<int64_t> tgt(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 6; ++j) in[size_t(i * 6 + j)] = float(i * 10 + j);
    tgt[size_t(i)] = i;
  }
  return std::make_shared<TensorDataset>(tensor(in, {n, 2, 3}), tensor(tgt, {n}));
}

// A data set defined by a function, using Dataset's default gather.
class FnDataset : public Dataset {
 public:
  FnDataset(int64_t n, std::function<Example(int64_t)> fn) : n_(n), fn_(std::move(fn)) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override { return fn_(index); }

 private:
  int64_t n_;
  std::function<Example(int64_t)> fn_;
};

Example numbered_example(int64_t i) {
  Tensor in = full({2, 3}, double(i), {.dtype = kF32});
  return {in, scalar_tensor(i, {.dtype = kI64})};
}

// The example indices of a batch (its targets) and a check that its inputs match them.
std::vector<int64_t> ids(const Batch& b) {
  std::vector<int64_t> t = b.target.to_vector<int64_t>();
  std::vector<float> in = b.input.to_vector<float>();
  EXPECT_EQ(b.input.shape(), Shape({b.size(), 2, 3}));
  EXPECT_EQ(in.size(), t.size() * 6);
  for (size_t k = 0; k < t.size(); ++k)
    for (size_t j = 0; j < 6; ++j) EXPECT_EQ(in[k * 6 + j], float(t[k] * 10 + int64_t(j))) << "row " << k;
  return t;
}

// The rest of the current epoch, batch by batch.
std::vector<std::vector<int64_t>> rest_of_epoch(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  while (auto b = loader.next()) out.push_back(ids(*b));
  return out;
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

class DataLoaderP : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Prefetch, DataLoaderP, ::testing::Values(0, 2),
                         [](const auto& info) { return "prefetch" + std::to_string(info.param); });

TEST_P(DataLoaderP, SequentialBatchesAndTheShortLastOne) {
  DataLoader loader(numbered(10), {.batch_size = 4, .shuffle = false, .prefetch = GetParam()});
  EXPECT_EQ(loader.size(), 3);
  EXPECT_EQ(loader.samples_per_epoch(), 10);
  EXPECT_EQ(rest_of_epoch(loader), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_TRUE(loader.epoch_done());
  EXPECT_EQ(loader.position(), 3);
  EXPECT_FALSE(loader.next().has_value());

  DataLoader dropped(numbered(10), {.batch_size = 4, .shuffle = false, .drop_last = true, .prefetch = GetParam()});
  EXPECT_EQ(dropped.size(), 2);
  EXPECT_EQ(dropped.samples_per_epoch(), 8);
  EXPECT_EQ(rest_of_epoch(dropped), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

// Issue 23: `--batch-size 4611686018427387904` with 64 examples segfaulted
// (buffers of batch_size rows, their size wrapped). Buffers hold what a batch
// can: min(batch_size, N) rows.
TEST_P(DataLoaderP, HugeBatchSizeAllocatesOnlyWhatTheDatasetHolds) {
  for (int64_t batch_size : {int64_t(1) << 40, int64_t(1) << 62, std::numeric_limits<int64_t>::max()}) {
    SCOPED_TRACE(batch_size);
    reset_peak_memory_stats();
    const int64_t before = memory_stats().current_bytes;
    DataLoader loader(numbered(10), {.batch_size = batch_size, .shuffle = true, .seed = 3, .prefetch = GetParam()});
    EXPECT_EQ(loader.size(), 1);
    EXPECT_EQ(loader.samples_per_epoch(), 10);
    auto batches = rest_of_epoch(loader);
    ASSERT_EQ(batches.size(), 1u);
    EXPECT_EQ(batches[0].size(), 10u);
    EXPECT_LT(memory_stats().peak_bytes - before, 1 << 16);  // (prefetch + 2) buffers of 10 rows
    DataLoader dropped(numbered(10), {.batch_size = batch_size, .drop_last = false, .prefetch = GetParam()});
    EXPECT_EQ(dropped.size(), 1);
    EXPECT_KILN_ERROR(DataLoader(numbered(10), {.batch_size = batch_size, .drop_last = true}),
                      "[DataLoader] drop_last with a dataset of 10 examples");
  }
}

TEST_P(DataLoaderP, ShuffledOrderIsTheSamplersAndEachForLoopIsOneEpoch) {
  DataLoader loader(numbered(23), {.batch_size = 5, .shuffle = true, .seed = 7, .prefetch = GetParam()});
  Sampler reference(23, true, 7);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen;
    int64_t batches = 0;
    for (const Batch& b : loader) {
      std::vector<int64_t> t = ids(b);
      seen.insert(seen.end(), t.begin(), t.end());
      ++batches;
      EXPECT_EQ(loader.position(), batches);
    }
    EXPECT_EQ(loader.epoch(), epoch);
    EXPECT_EQ(batches, 5);
    EXPECT_EQ(seen, reference.order()) << "epoch " << epoch;
    reference.next_epoch();
  }
}

TEST_P(DataLoaderP, NextEpochDiscardsTheRestOfTheCurrentOne) {
  DataLoader loader(numbered(20), {.batch_size = 4, .seed = 1, .prefetch = GetParam()});
  Sampler reference(20, true, 1);
  loader.next();
  loader.next_epoch();
  reference.next_epoch();
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(loader.position(), 0);
  EXPECT_EQ(flat(rest_of_epoch(loader)), reference.order());
}

// A loader restored from a state hands out exactly the batches the saved one
// would have handed out next: mid-epoch, at an epoch's end, into a loader with
// another prefetch and another seed (the state carries the order).
TEST_P(DataLoaderP, ResumesBitForBitMidEpochAndAtTheEpochBoundary) {
  const int other_prefetch = GetParam() == 0 ? 2 : 0;
  for (int64_t taken : {0, 1, 3, 6}) {  // 6 batches: the whole epoch
    DataLoader a(numbered(23), {.batch_size = 4, .seed = 11, .prefetch = GetParam()});
    a.next();  // epoch 0 partly seen, then epoch 1
    a.next_epoch();
    for (int64_t i = 0; i < taken; ++i) a.next();
    State saved = a.state();
    EXPECT_EQ(saved.at("epoch"), "1");
    EXPECT_EQ(saved.at("cursor"), std::to_string(std::min<int64_t>(taken * 4, 23)));
    EXPECT_EQ(saved.at("batch_size"), "4");
    EXPECT_EQ(saved.at("drop_last"), "0");

    for (int prefetch : {GetParam(), other_prefetch}) {
      DataLoader b(numbered(23), {.batch_size = 4, .seed = 99, .prefetch = prefetch});
      b.next();  // b's worker is mid-flight when the state lands
      b.load_state(saved);
      EXPECT_EQ(b.epoch(), 1);
      EXPECT_EQ(b.position(), taken);
      EXPECT_EQ(b.epoch_done(), taken == 6);
      DataLoader a2(numbered(23), {.batch_size = 4, .seed = 0, .prefetch = GetParam()});
      a2.load_state(saved);
      EXPECT_EQ(rest_of_epoch(b), rest_of_epoch(a2)) << "taken " << taken << " prefetch " << prefetch;
      b.next_epoch();
      a2.next_epoch();
      EXPECT_EQ(rest_of_epoch(b), rest_of_epoch(a2));
    }
    // And the original itself continues with those batches.
    DataLoader b(numbered(23), {.batch_size = 4, .prefetch = other_prefetch});
    b.load_state(saved);
    EXPECT_EQ(rest_of_epoch(b), rest_of_epoch(a));
  }
}

TEST_P(DataLoaderP, BadStatesAreRefusedAndChangeNothing) {
  DataLoader a(numbered(20), {.batch_size = 4, .seed = 2, .prefetch = GetParam()});
  a.next();
  a.next();
  const State good = a.state();
  auto with = [&](const std::string& key, const std::string& value) {
    State s = good;
    s[key] = value;
    return s;
  };
  DataLoader b(numbered(20), {.batch_size = 4, .seed = 2, .prefetch = GetParam()});
  b.next();
  const std::string op = "[DataLoader.load_state] ";
  EXPECT_KILN_ERROR(b.load_state(with("batch_size", "5")), op + "the state is of batch_size 5, this loader's is 4");
  EXPECT_KILN_ERROR(b.load_state(with("drop_last", "1")), op + "the state has drop_last, this loader has not");
  EXPECT_KILN_ERROR(b.load_state(with("size", "21")),
                    op + "the state is of a dataset of 21 examples, this loader's has 20");
  EXPECT_KILN_ERROR(b.load_state(with("cursor", "6")),
                    op + "cursor 6 is not at a batch boundary (batch_size 4, 5 batches per epoch)");
  EXPECT_KILN_ERROR(b.load_state(with("cursor", "24")), "cursor 24 is not at a batch boundary");
  EXPECT_KILN_ERROR(b.load_state(with("cursor", "-4")), "cursor -4 is not at a batch boundary");
  EXPECT_KILN_ERROR(b.load_state(with("shuffle", "0")), "[Sampler.load_state] the state does not shuffle");
  EXPECT_KILN_ERROR(b.load_state(with("epoch", "x")), "state 'epoch' is 'x', not an integer");
  EXPECT_KILN_ERROR(b.load_state(with("colour", "red")), "[Sampler.load_state] unknown key 'colour'");
  State missing = good;
  missing.erase("batch_size");
  EXPECT_KILN_ERROR(b.load_state(missing), op + "state has no 'batch_size'");
  // b is where it was: one batch in, the rest of the epoch as a twin's.
  EXPECT_EQ(b.position(), 1);
  DataLoader twin(numbered(20), {.batch_size = 4, .seed = 2, .prefetch = 0});
  twin.next();
  EXPECT_EQ(rest_of_epoch(b), rest_of_epoch(twin));

  DataLoader dropping(numbered(20), {.batch_size = 6, .drop_last = true, .prefetch = GetParam()});
  State d = dropping.state();
  d["cursor"] = "20";  // drop_last: the epoch ends at 18
  EXPECT_KILN_ERROR(dropping.load_state(d), "cursor 20 is not at a batch boundary (batch_size 6, 3 batches per epoch)");
  d["cursor"] = "18";
  dropping.load_state(d);
  EXPECT_TRUE(dropping.epoch_done());
}

// A batch the caller keeps is never overwritten: the loader allocates a fresh
// buffer instead; batches the caller lets go are recycled (no allocation per
// batch in the steady state).
TEST_P(DataLoaderP, AKeptBatchIsNeverOverwrittenAndReleasedBuffersAreReused) {
  DataLoader loader(numbered(400), {.batch_size = 8, .shuffle = true, .seed = 3, .prefetch = GetParam()});
  Batch kept = *loader.next();
  Tensor kept_view = kept.input.view({8, 6});  // a view holds the storage too
  const std::vector<float> kept_in = kept.input.to_vector<float>();
  const std::vector<int64_t> kept_ids = ids(kept);
  std::set<void*> buffers;
  for (const Batch& b : loader) {
    ids(b);
    buffers.insert(b.input.data_ptr());
    EXPECT_NE(b.input.data_ptr(), kept.input.data_ptr());
  }
  EXPECT_EQ(kept.input.to_vector<float>(), kept_in);
  EXPECT_EQ(kept.target.to_vector<int64_t>(), kept_ids);
  EXPECT_EQ(kept_view.to_vector<float>(), kept_in);
  // 49 batches through prefetch + 2 buffers (one more while `kept` held one).
  EXPECT_LE(buffers.size(), size_t(GetParam()) + 3) << "a buffer allocated per batch?";

  // Steady state with nothing kept: the same few buffers, epoch after epoch.
  // (A new epoch allocates its permutation; batches allocate no tensor storage.)
  std::set<void*> later;
  for (int epoch = 0; epoch < 2; ++epoch) {
    int64_t allocations = -1;
    for (const Batch& b : loader) {
      later.insert(b.input.data_ptr());
      if (allocations < 0) allocations = memory_stats().alloc_count;
    }
    EXPECT_EQ(memory_stats().alloc_count, allocations) << "tensor storage allocated per batch";
  }
  EXPECT_LE(later.size(), size_t(GetParam()) + 3);
}

TEST_P(DataLoaderP, AnExceptionInGatherIsRethrownOnTheCallersThread) {
  auto ds = std::make_shared<FnDataset>(12, [](int64_t i) {
    KILN_CHECK(i != 6, "Broken.get", "cannot read example {}", i);
    return numbered_example(i);
  });
  DataLoader loader(ds, {.batch_size = 3, .shuffle = false, .prefetch = GetParam()});
  EXPECT_EQ(loader.next()->target.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(loader.next()->target.to_vector<int64_t>(), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_KILN_ERROR(loader.next(), "[Broken.get] cannot read example 6");
  EXPECT_EQ(loader.position(), 2);                                         // the failed batch was not handed out
  EXPECT_KILN_ERROR(loader.next(), "[Broken.get] cannot read example 6");  // retried, fails again
  loader.next_epoch();
  const std::vector<float> first{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
  EXPECT_EQ(loader.next()->input.to_vector<float>(), first);
}

TEST_P(DataLoaderP, ExamplesOfDifferingShapesAreAnError) {
  auto ds = std::make_shared<FnDataset>(8, [](int64_t i) {
    if (i == 5) return Example{zeros({3, 2}), scalar_tensor(i, {.dtype = kI64})};
    return numbered_example(i);
  });
  DataLoader loader(ds, {.batch_size = 4, .shuffle = false, .prefetch = GetParam()});
  loader.next();
  EXPECT_KILN_ERROR(loader.next(),
                    "[Dataset.gather] example 5 has input [3, 2] f32, but the batch's rows are [2, 3] f32");

  auto ints = std::make_shared<FnDataset>(4, [](int64_t i) {
    return Example{full({2, 3}, 1.0, {.dtype = i == 2 ? kF64 : kF32}), scalar_tensor(i, {.dtype = kI64})};
  });
  DataLoader l2(ints, {.batch_size = 4, .shuffle = false, .prefetch = GetParam()});
  EXPECT_KILN_ERROR(l2.next(), "example 2 has input [2, 3] f64, but the batch's rows are [2, 3] f32");
}

TEST_P(DataLoaderP, TheWorkerStopsCleanlyWhateverItIsDoing) {
  // Destroyed with a full queue, right after next_epoch, and before any batch.
  for (int k = 0; k < 20; ++k) {
    DataLoader loader(numbered(100), {.batch_size = 2, .prefetch = GetParam()});
    if (k % 2) loader.next();
    if (k % 3) loader.next_epoch();
    if (k % 5) loader.next();
  }
}

TEST(DataLoader, DefaultGatherMatchesTheExamples) {
  auto ds = std::make_shared<FnDataset>(7, numbered_example);
  DataLoader loader(ds, {.batch_size = 3, .shuffle = false, .prefetch = 1});
  std::vector<float> expected;
  for (int64_t i = 0; i < 3; ++i) expected.insert(expected.end(), 6, float(i));
  Batch b = *loader.next();
  EXPECT_EQ(b.input.shape(), Shape({3, 2, 3}));
  EXPECT_EQ(b.target.shape(), Shape({3}));
  EXPECT_EQ(b.input.to_vector<float>(), expected);
  loader.next();
  Batch last = *loader.next();
  EXPECT_EQ(last.input.shape(), Shape({1, 2, 3}));
  EXPECT_EQ(last.target.to_vector<int64_t>(), std::vector<int64_t>{6});
}

TEST(DataLoader, BadOptionsAreRefused) {
  EXPECT_KILN_ERROR(DataLoader(numbered(4), {.batch_size = 0}), "[DataLoader] batch_size must be positive, got 0");
  EXPECT_KILN_ERROR(DataLoader(numbered(4), {.prefetch = -1}), "[DataLoader] prefetch must be non-negative, got -1");
  EXPECT_KILN_ERROR(DataLoader(nullptr), "[DataLoader] dataset is null");
  EXPECT_KILN_ERROR(DataLoader(numbered(0), {.batch_size = 4, .drop_last = true}),
                    "[DataLoader] drop_last with a dataset of 0 examples and batch_size 4 leaves no batch");
  EXPECT_KILN_ERROR(DataLoader(numbered(3), {.batch_size = 4, .drop_last = true}),
                    "drop_last with a dataset of 3 examples and batch_size 4 leaves no batch");
  // Empty without drop_last: an epoch of no batches.
  DataLoader empty(numbered(0), {.batch_size = 4});
  EXPECT_EQ(empty.size(), 0);
  EXPECT_FALSE(empty.next().has_value());
  int64_t n = 0;
  for (const Batch& b : empty) n += b.size();
  EXPECT_EQ(n, 0);
}

TEST(TensorDataset, RowsAreExamplesAndBadInputsAreRefused) {
  auto ds = numbered(5);
  EXPECT_EQ(ds->size(), 5);
  Example e = ds->get(3);
  EXPECT_EQ(e.input.shape(), Shape({2, 3}));
  EXPECT_EQ(e.input.to_vector<float>(), (std::vector<float>{30, 31, 32, 33, 34, 35}));
  EXPECT_EQ(e.target.shape(), Shape({}));
  EXPECT_EQ(e.target.item<int64_t>(), 3);
  EXPECT_KILN_ERROR(ds->get(5), "[TensorDataset.get] index 5 is out of range for 5 examples");
  EXPECT_KILN_ERROR(ds->get(-1), "index -1 is out of range");

  Batch out{empty({2, 2, 3}), empty({2}, {.dtype = kI64})};
  std::vector<int64_t> idx{4, 1};
  ds->gather(idx, out);
  EXPECT_EQ(out.input.to_vector<float>(), (std::vector<float>{40, 41, 42, 43, 44, 45, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(out.target.to_vector<int64_t>(), (std::vector<int64_t>{4, 1}));
  std::vector<int64_t> bad{0, 7};
  EXPECT_KILN_ERROR(ds->gather(bad, out), "[TensorDataset.gather] index 7 is out of range for 5 examples");
  Batch wrong{empty({2, 6}), empty({2}, {.dtype = kI64})};
  EXPECT_KILN_ERROR(ds->gather(idx, wrong),
                    "[TensorDataset.gather] the batch's input is [2, 6] f32, expected [2, 2, 3] f32");
  Batch wrong_dtype{empty({2, 2, 3}), empty({2}, {.dtype = kI32})};
  EXPECT_KILN_ERROR(ds->gather(idx, wrong_dtype), "the batch's target is [2] i32, expected [2] i64");

  EXPECT_KILN_ERROR(
      TensorDataset(zeros({4, 2}), zeros({5})),
      "[TensorDataset] inputs and targets must have the same first dimension, got [4, 2] f32 and [5] f32");
  EXPECT_KILN_ERROR(TensorDataset(zeros({}), zeros({1})), "need a first (example) dimension");
  EXPECT_KILN_ERROR(TensorDataset(Tensor(), zeros({1})), "inputs and targets must be defined");

  // Non-contiguous inputs are copied once into row-major rows.
  Tensor x = arange(0, 6, 1, {.dtype = kF32}).view({2, 3}).t();  // [3, 2]: rows (0, 3), (1, 4), (2, 5)
  TensorDataset t(x, arange(0, 3, 1, {.dtype = kI64}));
  EXPECT_TRUE(t.inputs().is_contiguous());
  EXPECT_EQ(t.get(1).input.to_vector<float>(), (std::vector<float>{1, 4}));
}

}  // namespace
}  // namespace kiln::data
