// `kiln rl dqn` / `kiln rl sac`, short: a few hundred steps must evaluate at
// every eval_every, log one CSV row per evaluation and checkpoint the run;
// bad options are named errors before anything is written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/kiln/rl_offpolicy.h"
#include "kiln/io/checkpoint.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

TEST(RlOffPolicyJob, DqnAndSacEvaluateLogAndCheckpoint) {
  for (const std::string algo : {"dqn", "sac"}) {
    const std::string out = kiln::testing::fresh_dir();
    std::ostringstream log;
    OffPolicyJobResult r =
        run_offpolicy({.algo = algo, .total_steps = 400, .out = out, .eval_every = 200, .eval_episodes = 1, .log = &log});
    EXPECT_EQ(r.global_step, 400) << algo;
    EXPECT_TRUE(std::isfinite(r.eval_return)) << algo;
    EXPECT_EQ(r.target_return, algo == "dqn" ? 475 : -200);
    EXPECT_EQ(int64_t(kiln::testing::read_lines(r.csv).size()), 1 + 2) << algo;  // header, evaluations at 200 and 400
    ASSERT_TRUE(std::filesystem::exists(r.checkpoint)) << algo;
    EXPECT_NE(io::read_checkpoint_info(r.checkpoint).config.find("\"job\":\"" + algo + "\""), std::string::npos);
    EXPECT_NE(log.str().find("after 400 steps"), std::string::npos) << log.str();
  }
}

TEST(RlOffPolicyJob, BadOptionsAreNamedErrors) {
  const std::string out = kiln::testing::fresh_dir() + "/run";
  EXPECT_KILN_ERROR(run_offpolicy({.algo = "ppo", .out = out}), "dqn or sac");
  EXPECT_KILN_ERROR(run_offpolicy({.algo = "dqn", .env = "pendulum", .out = out}), "environment must be cartpole");
  EXPECT_KILN_ERROR(run_offpolicy({.algo = "sac", .out = out, .eval_episodes = 0}), "--eval-episodes");
  EXPECT_KILN_ERROR(run_offpolicy({.algo = "sac", .total_steps = -1, .out = out}), "--total-steps");
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace kiln::app
