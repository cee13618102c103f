// `kiln train lm --moe-experts ...` (docs/moe.md): a tiny MoE GPT learns, its
// metrics.csv carries the routing telemetry, the bias balancing runs, and a
// resume gives the uninterrupted run's parameters bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/io/checkpoint.h"
#include "tests/apps/lm_testing.h"
#include "tests/support/apps_testing.h"

namespace kiln::app {
namespace {

LmOptions tiny_moe(const std::string& data, const std::string& out, std::ostream* log) {
  LmOptions o = tiny_lm(data, out, log);
  o.moe_experts = 4;
  o.moe_top_k = 2;
  o.moe_balance = "bias";
  return o;
}

TEST(MoELmJob, LearnsAndLogsTheTelemetry) {
  std::string dir = kiln::testing::fresh_dir();
  std::string data = testing::corpus_slice(dir, 20000);
  std::ostringstream log;
  LmOptions o = tiny_moe(data, dir + "/run", &log);
  o.iters = 60;
  o.eval_interval = 30;
  LmResult r = train_lm(o);
  LanguageModel lm = load_lm(r.checkpoint);
  EXPECT_EQ(lm.config.moe_experts, 4);
  EXPECT_EQ(lm.config.moe_balance, nn::MoEBalance::bias);
  EXPECT_LT(r.val_loss, std::log(double(lm.config.vocab_size)) - 0.7) << log.str();
  const auto lines = kiln::testing::read_lines(r.csv);
  ASSERT_EQ(int64_t(lines.size()), 1 + 60);
  EXPECT_NE(lines[0].find("val/loss,moe/max_violation,moe/running_max_violation,moe/entropy,moe/z_loss,moe/aux_loss,"
                          "moe/l0/tokens0"),
            std::string::npos)
      << lines[0];
  // The bias moved away from zero (the buffer is in the checkpoint).
  const std::vector<float> b = lm.model->moe_layers()[0]->expert_bias.to_vector<float>();
  double moved = 0;
  for (float v : b) moved += std::abs(v);
  EXPECT_GT(moved, 0.0);
  std::filesystem::remove_all(dir);
}

TEST(MoELmJob, ResumeIsExact) {
  std::string dir = kiln::testing::fresh_dir();
  std::string data = testing::corpus_slice(dir, 8000);
  std::ostringstream log;
  LmOptions whole = tiny_moe(data, dir + "/whole", &log);
  LmResult a = train_lm(whole);
  LmOptions part = whole;
  part.out = dir + "/part";
  std::filesystem::create_directories(part.out + "/checkpoints");
  const std::string step10 = dir + "/whole/checkpoints/step-10.safetensors";
  ASSERT_EQ(io::read_checkpoint_info(step10).progress.global_step, 10) << log.str();
  std::filesystem::copy_file(a.csv, part.out + "/metrics.csv");
  part.resume = step10;
  LmResult b = train_lm(part);
  EXPECT_EQ(b.iters, 20);
  EXPECT_EQ(b.val_loss, a.val_loss);
  LanguageModel ma = load_lm(a.checkpoint), mb = load_lm(b.checkpoint);
  auto sa = ma.model->state_dict(), sb = mb.model->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& [k, v] : sa) EXPECT_TRUE(kiln::testing::equal(sb.at(k), v)) << k;
  // The metrics too, the telemetry's running values included (they ride in
  // the checkpoint): every row's routing columns as the uninterrupted run's.
  const auto la = kiln::testing::read_lines(a.csv), lb = kiln::testing::read_lines(b.csv);
  ASSERT_EQ(la.size(), lb.size());
  auto cells = [](const std::string& line) {
    std::vector<std::string> out;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) out.push_back(c);
    return out;
  };
  const std::vector<std::string> header = cells(la[0]);
  ASSERT_EQ(header, cells(lb[0]));
  int compared = 0;
  for (size_t row = 1; row < la.size(); ++row) {
    const auto ca = cells(la[row]), cb = cells(lb[row]);
    ASSERT_EQ(ca.size(), header.size());
    ASSERT_EQ(cb.size(), header.size());
    for (size_t c = 0; c < header.size(); ++c) {
      if (header[c].rfind("moe/", 0) != 0 && header[c] != "loss") continue;
      EXPECT_EQ(ca[c], cb[c]) << header[c] << " row " << row;
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::app
