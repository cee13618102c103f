// Tests of rl::RolloutStorage: GAE against the plain-Python reference of
// tools/goldens/rl.py (explicit discounted sums and lambda-returns, with
// terminations, truncations bootstrapped from V(final_obs), and neither) and
// a hand-computed case; flat views share the storage; gather picks rows;
// errors leave the storage unchanged.
#include "kiln/rl/rollout.h"
#include "tests/support/rl_testing.h"

namespace kiln::rl {
namespace {

using testing::all_close;
using testing::golden;
using testing::golden_tensor;

Space obs_space() { return Space::box({3}, {-1, -1, -1}, {1, 1, 1}); }

TEST(RlRollout, GaeMatchesThePythonReference) {
  const auto& j = golden("rl_gae");
  Tensor rewards = golden_tensor(j.at("rewards")).to(kF32), values = golden_tensor(j.at("values")).to(kF32);
  Tensor final_values = golden_tensor(j.at("final_values")).to(kF32);
  Tensor term = golden_tensor(j.at("terminated")), trunc = golden_tensor(j.at("truncated"));
  const int64_t T = rewards.size(0), E = rewards.size(1);
  RolloutStorage r(T, E, obs_space(), Space::discrete(2));
  for (int64_t t = 0; t < T; ++t) {
    r.insert(t, {.obs = zeros({E, 3}), .actions = zeros({E}, {.dtype = kI64}), .log_probs = zeros({E}),
                 .values = values[t]});
    r.insert_outcome(t, rewards[t], term[t], trunc[t]);
    if (any(trunc[t]).item<bool>()) r.insert_final_values(t, final_values[t]);
  }
  r.compute_gae(golden_tensor(j.at("last_values")), j.at("gamma").get<double>(), j.at("lambda").get<double>());
  EXPECT_TRUE(all_close(r.advantages(), golden_tensor(j.at("advantages")).to(kF32), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(r.returns(), golden_tensor(j.at("returns")).to(kF32), 1e-5, 1e-5));
}

TEST(RlRollout, GaeByHandTerminationAndTruncation) {
  // One environment, T = 3, gamma 0.5, lambda 0.5, values 1, 2, 3, rewards 1 each.
  // t=0 truncated with V(final) = 10; t=1 terminated; t=2 running, last value 4.
  RolloutStorage r(3, 1, obs_space(), Space::discrete(2));
  const float v[] = {1, 2, 3};
  const bool term[] = {false, true, false}, trunc[] = {true, false, false};
  for (int64_t t = 0; t < 3; ++t) {
    r.insert(t, {.obs = zeros({1, 3}), .actions = zeros({1}, {.dtype = kI64}), .log_probs = zeros({1}),
                 .values = full({1}, v[t])});
    r.insert_outcome(t, ones({1}), full({1}, term[t], {.dtype = kBool}), full({1}, trunc[t], {.dtype = kBool}));
  }
  r.insert_final_values(0, full({1}, 10.0));
  r.compute_gae(full({1}, 4.0), 0.5, 0.5);
  // t=2: delta = 1 + 0.5*4 - 3 = 0            -> adv 0
  // t=1: delta = 1 + 0 - 2 = -1 (no bootstrap) -> adv -1 (the episode ends: no carry)
  // t=0: delta = 1 + 0.5*10 - 1 = 5            -> adv 5 (truncated: bootstrap, no carry)
  EXPECT_EQ(r.advantages().to_vector<float>(), (std::vector<float>{5, -1, 0}));
  EXPECT_EQ(r.returns().to_vector<float>(), (std::vector<float>{6, 1, 3}));
  // Without ends the advantages carry: t=1 delta = 1 + 0.5*3 - 2 = 0.5, adv = 0.5 + 0.25*0.
  r.insert_outcome(1, ones({1}), zeros({1}, {.dtype = kBool}), zeros({1}, {.dtype = kBool}));
  r.insert_outcome(0, ones({1}), zeros({1}, {.dtype = kBool}), zeros({1}, {.dtype = kBool}));
  r.compute_gae(full({1}, 4.0), 0.5, 0.5);
  // t=0: delta = 1 + 0.5*2 - 1 = 1, adv = 1 + 0.25 * 0.5 = 1.125
  EXPECT_EQ(r.advantages().to_vector<float>(), (std::vector<float>{1.125f, 0.5f, 0}));
}

TEST(RlRollout, FlatViewsShareTheStorageAndGatherPicksRows) {
  const int64_t T = 4, E = 3;
  RolloutStorage r(T, E, obs_space(), Space::box({2}, {-1, -1}, {1, 1}));
  for (int64_t t = 0; t < T; ++t) {
    Tensor base = arange(double(t * E), double(t * E + E)).to(kF32);  // row index t*E + e
    r.insert(t, {.obs = base.unsqueeze(1).expand({E, 3}).contiguous(), .actions = base.unsqueeze(1).expand({E, 2}).contiguous(),
                 .raw_actions = (base * 2.0).unsqueeze(1).expand({E, 2}).contiguous(), .log_probs = base, .values = base});
  }
  RolloutBatch flat = r.flat();
  EXPECT_EQ(flat.obs.shape(), (Shape{12, 3}));
  EXPECT_EQ(flat.raw_actions.shape(), (Shape{12, 2}));
  EXPECT_EQ(flat.values.shape(), (Shape{12}));
  EXPECT_EQ(flat.obs.data_ptr(), r.obs().data_ptr());  // views, not copies
  EXPECT_EQ(flat.advantages.data_ptr(), r.advantages().data_ptr());
  EXPECT_TRUE(flat.carriers().is_same(flat.raw_actions));
  EXPECT_EQ(flat.log_probs.to_vector<float>(), arange(0.0, 12.0).to(kF32).to_vector<float>());
  RolloutBatch b = r.gather(tensor<int64_t>({7, 0, 11}));
  EXPECT_EQ(b.values.to_vector<float>(), (std::vector<float>{7, 0, 11}));
  EXPECT_EQ(b.raw_actions.to_vector<float>(), (std::vector<float>{14, 14, 0, 0, 22, 22}));
  EXPECT_EQ(b.obs.shape(), (Shape{3, 3}));
  EXPECT_FALSE(b.obs.is_same_storage(r.obs()));
  RolloutStorage d(2, 2, obs_space(), Space::discrete(3));
  EXPECT_FALSE(d.raw_actions().defined());
  RolloutBatch df = d.flat();
  EXPECT_TRUE(df.carriers().is_same(df.actions));
}

TEST(RlRollout, BadCallsAreErrorsAndChangeNothing) {
  RolloutStorage r(2, 3, obs_space(), Space::discrete(2));
  StepRecord ok{.obs = ones({3, 3}), .actions = ones({3}, {.dtype = kI64}), .log_probs = ones({3}), .values = ones({3})};
  StepRecord bad = ok;
  bad.values = ones({2});
  EXPECT_KILN_ERROR(r.insert(0, bad), "[RolloutStorage.insert] values must be [3], got [2] f32");
  EXPECT_EQ(sum(r.obs()).item<float>(), 0.0f);  // the obs row was not written either
  bad = ok;
  bad.actions = ones({3});
  EXPECT_KILN_ERROR(r.insert(0, bad), "[RolloutStorage.insert] actions must be [3] i64, got [3] f32");
  bad = ok;
  bad.raw_actions = ones({3, 1});
  EXPECT_KILN_ERROR(r.insert(0, bad), "raw_actions are not taken for Discrete(2) actions");
  EXPECT_KILN_ERROR(r.insert(2, ok), "[RolloutStorage.insert] step 2 is outside [0, 2)");
  EXPECT_KILN_ERROR(r.insert_outcome(0, ones({3}), ones({3}), ones({3}, {.dtype = kBool})),
                    "terminated and truncated must be [3] bool");
  EXPECT_KILN_ERROR(r.compute_gae(ones({2}), 0.99, 0.95), "[RolloutStorage.compute_gae] last_values must be [3] floating");
  EXPECT_KILN_ERROR(r.compute_gae(ones({3}), 1.5, 0.95), "gamma 1.5 and lambda 0.95 must lie in [0, 1]");
  EXPECT_KILN_ERROR(r.gather(tensor<int64_t>({0, 6})), "index 6 is out of range");
  EXPECT_KILN_ERROR(RolloutStorage(0, 3, obs_space(), Space::discrete(2)), "num_steps 0 and num_envs 3 must be positive");
  EXPECT_KILN_ERROR(RolloutStorage(2, 3, obs_space(), Space::binary({2})), "actions must be Discrete or Box");
}

}  // namespace
}  // namespace kiln::rl
