// rl::ReplayBuffer: ring order and wraparound, next_obs from final_obs,
// seeded uniform sampling (the rows randint draws), errors that change
// nothing, and checkpoints that resume exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numbers>

#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

/// Transition k of a synthetic stream: obs [k, -k], action k % 3, reward k,
/// next_obs [k + 100, -k], terminated when k is odd. Identifies its row.
struct Rows {
  Tensor obs, action;
  Transition step;
};
Rows rows(int64_t first, int64_t n) {
  std::vector<float> obs, next, reward;
  std::vector<int64_t> action;
  std::vector<bool> term;
  for (int64_t k = first; k < first + n; ++k) {
    obs.insert(obs.end(), {float(k), float(-k)});
    next.insert(next.end(), {float(k + 100), float(-k)});
    action.push_back(k % 3);
    reward.push_back(float(k));
    term.push_back(k % 2 == 1);
  }
  Transition t{.obs = tensor(next, {n, 2}),
               .reward = tensor(reward),
               .terminated = tensor(term),
               .truncated = zeros({n}, {.dtype = kBool}),
               .final_obs = tensor(next, {n, 2})};
  return {tensor(obs, {n, 2}), tensor(action), t};
}
void add_rows(ReplayBuffer& b, int64_t first, int64_t n) {
  Rows r = rows(first, n);
  b.add(r.obs, r.action, r.step);
}
ReplayBuffer small_buffer(int64_t capacity) {
  return ReplayBuffer(capacity, Space::box({2}, {-1e9, -1e9}, {1e9, 1e9}), Space::discrete(3));
}

/// The transition ids k in a batch, checking that every field of a row
/// belongs to the same k.
std::vector<int64_t> ids(const ReplayBatch& b) {
  const std::vector<float> obs = b.obs.to_vector<float>(), next = b.next_obs.to_vector<float>();
  const std::vector<float> reward = b.reward.to_vector<float>();
  const std::vector<int64_t> action = b.action.to_vector<int64_t>();
  const std::vector<bool> term = b.terminated.to_vector<bool>();
  std::vector<int64_t> out;
  for (size_t i = 0; i < reward.size(); ++i) {
    const int64_t k = int64_t(reward[i]);
    EXPECT_EQ(obs[2 * i], float(k));
    EXPECT_EQ(obs[2 * i + 1], float(-k));
    EXPECT_EQ(next[2 * i], float(k + 100));
    EXPECT_EQ(action[i], k % 3);
    EXPECT_EQ(term[i], k % 2 == 1);
    out.push_back(k);
  }
  return out;
}

TEST(ReplayBuffer, SamplesAreTheRowsRandintDraws) {
  ReplayBuffer b = small_buffer(8);
  add_rows(b, 0, 3);
  add_rows(b, 3, 2);  // rows 0..4 hold k = 0..4
  EXPECT_EQ(b.size(), 5);
  EXPECT_EQ(b.capacity(), 8);
  Generator g(42), ref(42);
  ReplayBatch batch = b.sample(64, g);
  EXPECT_EQ(batch.obs.shape(), (Shape{64, 2}));
  EXPECT_EQ(batch.action.shape(), (Shape{64}));
  EXPECT_EQ(batch.action.dtype(), kI64);
  EXPECT_EQ(batch.terminated.dtype(), kBool);
  EXPECT_EQ(ids(batch), randint(0, 5, {64}, ref).to_vector<int64_t>());
  EXPECT_EQ(g.state(), ref.state());  // one randint's worth of the generator
}

TEST(ReplayBuffer, WrapsAroundOverwritingTheOldest) {
  ReplayBuffer b = small_buffer(5);
  add_rows(b, 0, 2);
  add_rows(b, 2, 2);
  add_rows(b, 4, 2);  // k = 5 wraps to row 0
  EXPECT_EQ(b.size(), 5);
  EXPECT_EQ(b.state().at("cursor"), "1");
  Generator g(1), ref(1);
  const std::vector<int64_t> slot = randint(0, 5, {200}, ref).to_vector<int64_t>();
  const std::vector<int64_t> got = ids(b.sample(200, g));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], slot[i] == 0 ? 5 : slot[i]) << i;
  // More rows than room in one add: only the last 5 remain, in ring order.
  // k = 10..16 with the cursor at 1: 10 and 11 would go to rows 1 and 2 and
  // be overwritten, so 12..16 go to rows 3, 4, 0, 1, 2.
  add_rows(b, 10, 7);
  EXPECT_EQ(b.state().at("cursor"), "3");
  Generator g2(2), ref2(2);
  const std::vector<int64_t> slot2 = randint(0, 5, {200}, ref2).to_vector<int64_t>();
  const std::vector<int64_t> got2 = ids(b.sample(200, g2));
  const int64_t expected_at[5] = {14, 15, 16, 12, 13};
  for (size_t i = 0; i < got2.size(); ++i) EXPECT_EQ(got2[i], expected_at[slot2[i]]) << i;
}

// Capacity 64 makes each storage tensor an exact allocator size class (64 to
// 512 bytes), so under ASan a ring write past the end is caught. Batches of
// 7 wrap at every offset; one of 100 is larger than the ring.
TEST(ReplayBuffer, RingWritesStayInTheStorage) {
  ReplayBuffer b = small_buffer(64);
  int64_t k = 0;
  for (int i = 0; i < 40; ++i, k += 7) add_rows(b, k, 7);
  add_rows(b, k, 100);
  k += 100;
  EXPECT_EQ(b.size(), 64);
  EXPECT_EQ(b.state().at("cursor"), std::to_string(k % 64));
  Generator g(4);
  for (int64_t id : ids(b.sample(500, g))) {  // only the last 64 transitions remain
    EXPECT_GE(id, k - 64);
    EXPECT_LT(id, k);
  }
}

TEST(ReplayBuffer, SamplingIsUniformAndSeeded) {
  ReplayBuffer b = small_buffer(10);
  add_rows(b, 0, 10);
  Generator g(3);
  std::map<int64_t, int> counts;
  for (int64_t k : ids(b.sample(20000, g))) counts[k]++;
  ASSERT_EQ(counts.size(), 10u);
  for (const auto& [k, n] : counts) EXPECT_NEAR(n, 2000, 5 * std::sqrt(20000 * 0.1 * 0.9)) << k;
  Generator a(5), c(5), d(6);
  EXPECT_TRUE(testing::equal(b.sample(32, a).reward, b.sample(32, c).reward));
  EXPECT_FALSE(testing::equal(b.sample(32, a).reward, b.sample(32, d).reward));
  // A batch is a copy: overwriting the buffer leaves it as it was.
  ReplayBatch batch = b.sample(8, c);
  const Tensor before = batch.obs.contiguous().to(kF64);
  add_rows(b, 50, 10);
  EXPECT_TRUE(testing::equal(batch.obs.to(kF64), before));
}

TEST(ReplayBuffer, NextObsIsTheFinalObservation) {
  CartPole env(3);
  ReplayBuffer b(1000, env.spec());
  Tensor obs = env.reset(0);
  int done = 0;
  for (int t = 0; t < 40; ++t) {
    Tensor action = full({3}, 1, {.dtype = kI64});  // the pole falls within ~10 steps
    Transition step = env.step(action);
    b.add(obs, action, step);
    done += sum(to(step.terminated, kI64)).item<int64_t>();
    obs = step.obs;
  }
  ASSERT_GT(done, 0);
  Generator g(0);
  ReplayBatch batch = b.sample(500, g);
  const std::vector<float> next = batch.next_obs.to_vector<float>();
  const std::vector<bool> term = batch.terminated.to_vector<bool>();
  int terminal = 0;
  for (size_t i = 0; i < term.size(); ++i) {
    if (!term[i]) continue;
    ++terminal;
    // The terminal observation, not the next episode's start.
    EXPECT_LT(next[4 * i + 2], -float(12 * 2 * std::numbers::pi / 360)) << i;
  }
  EXPECT_GT(terminal, 0);
}

TEST(ReplayBuffer, BadInputIsAnErrorAndChangesNothing) {
  EXPECT_KILN_ERROR(small_buffer(0), "[ReplayBuffer] capacity must be positive, got 0");
  EXPECT_KILN_ERROR(ReplayBuffer(4, Space::binary({2}), Space::discrete(2)),
                    "[ReplayBuffer] observation space Binary([2]) is not f32");
  ReplayBuffer b = small_buffer(6);
  EXPECT_KILN_ERROR(
      {
        Generator g(0);
        b.sample(4, g);
      },
      "[ReplayBuffer.sample] the buffer is empty");
  add_rows(b, 0, 3);
  Rows r = rows(3, 2);
  EXPECT_KILN_ERROR(b.add(zeros({2, 3}), r.action, r.step),
                    "[ReplayBuffer.add] obs [2, 3] f32 does not match the observation space Box([2], f32): expected "
                    "rows of [2] f32");
  EXPECT_KILN_ERROR(b.add(r.obs, zeros({2}), r.step),
                    "[ReplayBuffer.add] action [2] f32 does not match the action space Discrete(3) for obs [2, 2] f32: "
                    "expected [2] i64");
  EXPECT_KILN_ERROR(b.add(r.obs, zeros({3}, {.dtype = kI64}), r.step), "action [3] i64 does not match");
  Transition bad = r.step;
  bad.reward = zeros({2, 1});
  EXPECT_KILN_ERROR(b.add(r.obs, r.action, bad), "[ReplayBuffer.add] step.reward [2, 1] f32 must be [2] f32");
  bad = r.step;
  bad.terminated = zeros({2});
  EXPECT_KILN_ERROR(b.add(r.obs, r.action, bad), "step.terminated [2] f32 must be [2] bool");
  bad = r.step;
  bad.final_obs = Tensor();
  EXPECT_KILN_ERROR(b.add(r.obs, r.action, bad), "step.final_obs an undefined tensor must be [2, 2] f32 like obs");
  EXPECT_KILN_ERROR(
      {
        Generator g(0);
        b.sample(0, g);
      },
      "[ReplayBuffer.sample] batch_size must be positive, got 0");
  EXPECT_EQ(b.size(), 3);
  Generator g(7), ref(7);
  EXPECT_EQ(ids(b.sample(50, g)), randint(0, 3, {50}, ref).to_vector<int64_t>());  // rows 0..2 untouched
}

TEST(ReplayBuffer, ClearEmptiesIt) {
  ReplayBuffer b = small_buffer(4);
  add_rows(b, 0, 6);
  b.clear();
  EXPECT_EQ(b.size(), 0);
  EXPECT_EQ(b.state().at("cursor"), "0");
  add_rows(b, 20, 1);
  Generator g(0);
  EXPECT_EQ(ids(b.sample(5, g)), std::vector<int64_t>(5, 20));
}

TEST(ReplayBuffer, CheckpointResumesExactly) {
  const std::string path = testing::fresh_dir() + "/run.safetensors";
  ReplayBuffer b = small_buffer(7);
  add_rows(b, 0, 5);
  add_rows(b, 5, 4);  // wrapped: size 7, cursor 2
  {
    io::Checkpoint ckpt;
    b.checkpoint(ckpt);
    ckpt.save(path);
  }
  const io::CheckpointInfo info = io::read_checkpoint_info(path);
  std::vector<std::string> names;
  for (const auto& t : info.tensors) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"replay.action", "replay.next_obs", "replay.obs", "replay.reward",
                                             "replay.terminated"}));

  ReplayBuffer restored = small_buffer(7);
  add_rows(restored, 40, 2);  // different contents, replaced by the load
  {
    io::Checkpoint ckpt;
    restored.checkpoint(ckpt);
    ckpt.load(path);
  }
  EXPECT_EQ(restored.size(), 7);
  EXPECT_EQ(restored.state(), b.state());
  // Both continue identically: the same samples, the same overwrites.
  add_rows(b, 9, 3);
  add_rows(restored, 9, 3);
  Generator g1(11), g2(11);
  EXPECT_EQ(ids(restored.sample(100, g2)), ids(b.sample(100, g1)));

  // A buffer of another capacity refuses the file and keeps its contents.
  ReplayBuffer other = small_buffer(6);
  add_rows(other, 60, 2);
  io::Checkpoint ckpt;
  other.checkpoint(ckpt);
  EXPECT_KILN_ERROR(ckpt.load(path),
                    "model 'replay': [load_state_dict] ReplayBuffer not loaded, nothing was changed: "
                    "mismatched: 'obs' expects [6, 2] f32 but the state has [7, 2] f32");
  EXPECT_EQ(other.size(), 2);
  Generator g3(0);
  for (int64_t k : ids(other.sample(20, g3))) EXPECT_TRUE(k == 60 || k == 61);
}

TEST(ReplayBuffer, LoadStateChecksTheCounters) {
  ReplayBuffer b = small_buffer(5);
  add_rows(b, 0, 2);
  const io::State good = b.state();
  EXPECT_KILN_ERROR(b.load_state({{"capacity", "6"}, {"cursor", "0"}, {"size", "0"}}),
                    "[ReplayBuffer.load_state] the state is of a buffer of capacity 6, this one holds 5");
  EXPECT_KILN_ERROR(b.load_state({{"capacity", "5"}, {"cursor", "0"}, {"size", "6"}}), "size 6 is outside [0, 5]");
  EXPECT_KILN_ERROR(b.load_state({{"capacity", "5"}, {"cursor", "3"}, {"size", "2"}}),
                    "cursor 3 does not fit size 2 of capacity 5");
  EXPECT_KILN_ERROR(b.load_state({{"capacity", "5"}, {"cursor", "5"}, {"size", "5"}}), "cursor 5 does not fit");
  EXPECT_KILN_ERROR(b.load_state({{"capacity", "5"}, {"size", "2"}}), "state has no 'cursor'");
  EXPECT_EQ(b.state(), good);
  b.load_state({{"capacity", "5"}, {"cursor", "4"}, {"size", "5"}});
  EXPECT_EQ(b.size(), 5);
}

}  // namespace
}  // namespace kiln::rl
