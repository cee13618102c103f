// MoETelemetry: the layers' routing stats in Trainer::logs() and the CSV, the
// bias update after each step, and the starvation warning after 100 steps.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "kiln/train/callbacks/moe_telemetry.h"
#include "tests/train/tiny_run.h"

namespace kiln::train {
namespace {
using namespace kiln::testing;

// Runs the MoE on a fixed batch after each step, as a model's training
// forward would (registered before the telemetry).
struct ForwardEachStep : Callback {
  ForwardEachStep(nn::MoE& moe, Tensor x) : moe(moe), x(std::move(x)) {}
  void on_step_end(Trainer&, const StepResult&) override {
    NoGradGuard no_grad;
    moe.forward(x);
  }
  nn::MoE& moe;
  Tensor x;
};

TEST(MoETelemetry, LogsColumnsUpdatesBiasAndWarnsOnStarvation) {
  Rngs rngs(1);
  nn::MoE moe(4, {.num_experts = 3, .top_k = 1, .expert_hidden = 4, .balance = nn::MoEBalance::bias}, rngs);
  {
    NoGradGuard no_grad;  // expert 2 never wins: its router row is -10 on an all-positive input
    copy_(moe.router->weight.value(), tensor<float>({0, 0, 0, 0, 0.1f, 0, 0, 0, -10, -10, -10, -10}, {3, 4}));
  }
  Generator g(2);
  Tensor x = abs(randn({16, 4}, g));
  auto telemetry = std::make_shared<MoETelemetry>(std::vector<nn::MoE*>{&moe}, MoETelemetryOptions{.update_bias = true});
  const std::vector<std::string> cols = telemetry->columns();
  ASSERT_EQ(cols.size(), size_t(5 + 3 * 3));
  EXPECT_EQ(cols[0], "moe/max_violation");
  EXPECT_EQ(cols[5], "moe/l0/tokens0");
  EXPECT_EQ(cols.back(), "moe/l0/P2");

  std::string dir = fresh_dir();
  TinyRun r;
  auto csv = std::make_shared<CsvLogger>(dir + "/log.csv", CsvLoggerOptions{.append = false, .log_keys = cols});
  std::ostringstream out;
  Trainer trainer(21, {std::make_shared<ForwardEachStep>(moe, x), telemetry, csv}, run_to(out));  // 105 steps
  trainer.fit(r.task, *r.loader);

  const auto& logs = trainer.logs();
  EXPECT_EQ(logs.at("moe/l0/tokens2"), double(moe.stats().tokens_per_expert[2]));
  EXPECT_EQ(logs.at("moe/max_violation"), moe.stats().max_violation);
  // 105 bias updates of 1e-3: expert 2 (starved, below the mean) rose each time.
  EXPECT_NEAR(moe.expert_bias.to_vector<float>()[2], 0.105, 1e-5);
  // Expert 2 still gets nothing (-10 logits outweigh 0.1 of bias): one warning at step 100.
  EXPECT_EQ(moe.stats().tokens_per_expert[2], 0);
  EXPECT_EQ(telemetry->warnings(), 1);
  EXPECT_NE(out.str().find("warning: [MoE] layer 0 expert 2 received under 1% of the tokens for 100 consecutive steps"),
            std::string::npos)
      << out.str();
  std::ifstream in(dir + "/log.csv");
  std::string header;
  std::getline(in, header);
  EXPECT_NE(header.find("moe/max_violation,moe/running_max_violation,moe/entropy,moe/z_loss,moe/aux_loss,moe/l0/tokens0"),
            std::string::npos)
      << header;
  std::filesystem::remove_all(dir);
}

// The running values ride in checkpoints (state "moe_telemetry"): a state
// restores them bit for bit into fresh layers; a bad state changes nothing.
TEST(MoETelemetry, StateRestoresTheRunningValues) {
  const nn::MoEOptions opts{.num_experts = 3, .top_k = 1, .expert_hidden = 4};
  Rngs rngs(1);
  nn::MoE moe(4, opts, rngs);
  {
    NoGradGuard no_grad;  // expert 2 never wins, the others share unevenly
    copy_(moe.router->weight.value(), tensor<float>({0, 0.3f, 0, 0, 0.1f, 0, 0, 0, -10, -10, -10, -10}, {3, 4}));
  }
  Generator g(2);
  for (int i = 0; i < 7; ++i) {
    NoGradGuard no_grad;
    moe.forward(abs(randn({16, 4}, g)));
  }
  MoETelemetry telemetry({&moe});
  const State st = telemetry.state();
  EXPECT_EQ(st.at("layers"), "1");
  EXPECT_EQ(st.at("l0/starved_steps"), "0,0,7");

  Rngs rngs2(5);
  nn::MoE fresh(4, opts, rngs2);
  MoETelemetry restored({&fresh});
  restored.load_state(st);
  EXPECT_EQ(fresh.stats().running_max_violation, moe.stats().running_max_violation);
  EXPECT_GT(fresh.stats().running_max_violation, 0.0);
  EXPECT_EQ(fresh.stats().starved_steps, moe.stats().starved_steps);
  EXPECT_EQ(fresh.stats().training_forwards, 7);
  EXPECT_EQ(fresh.stats().forwards, 7);

  // Bad states: an error naming the problem, the layer untouched.
  Rngs rngs3(6);
  nn::MoE other(4, opts, rngs3);
  MoETelemetry target({&other});
  auto expect_unchanged = [&] {
    EXPECT_EQ(other.stats().running_max_violation, 0.0);
    EXPECT_EQ(other.stats().starved_steps, (std::vector<int64_t>{0, 0, 0}));
    EXPECT_EQ(other.stats().training_forwards, 0);
  };
  State bad = st;
  bad["l0/starved_steps"] = "1,2";
  EXPECT_KILN_ERROR(target.load_state(bad), "'l0/starved_steps' has 2 entries; layer 0 has 3 experts");
  expect_unchanged();
  bad = st;
  bad["l0/starved_steps"] = "1,x,2";
  EXPECT_KILN_ERROR(target.load_state(bad), "not comma-separated integers");
  bad = st;
  bad["layers"] = "2";
  EXPECT_KILN_ERROR(target.load_state(bad), "the state is of 2 MoE layers, the model has 1");
  bad = st;
  bad["l0/training_forwards"] = "3";  // fewer than the starvation count 7
  EXPECT_KILN_ERROR(target.load_state(bad), "layer 0: ");
  expect_unchanged();
  bad = st;
  bad.erase("l0/forwards");
  EXPECT_KILN_ERROR(target.load_state(bad), "state has no 'l0/forwards'");
  expect_unchanged();
}

}  // namespace
}  // namespace kiln::train
