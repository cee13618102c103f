// Summary: the spec's three lines, what they count, and a resumed run's
// summary covering the whole run.
#include "kiln/train/callbacks/summary.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <regex>
#include <sstream>
#include <thread>

#include "kiln/ops/random.h"
#include "kiln/train/callbacks/latency_histogram.h"
#include "output_fixture.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

using testing::Rig;
using testing::ScriptedTask;

io::State spec_example_state() {
  // The spec's example run: 4686 steps of batch 64 in 0.32 s.
  return {{"steps", "4686"},         {"samples", "299904"},      {"seconds", "0.32"},
          {"loss_sum", "2254.8952"}, {"initial_loss", "2.6558"}, {"final_loss", "0.2965"}};
}

TEST(Summary, SpecFormat) {
  Summary s;
  s.load_state(spec_example_state());
  EXPECT_EQ(s.text(64, 64),
            "summary: loss: initial 2.6558 · final 0.2965 · mean 0.4812\n"
            "Wall: 0.07 ms/step · 937.20K sample/s · 59.98M token/s\n"
            "run: 0.32s · 4686 steps · batch 64 · sequence 64 token/sample\n");
  // Not a sequence workload: no token/s, no sequence.
  EXPECT_EQ(s.text(64, 0),
            "summary: loss: initial 2.6558 · final 0.2965 · mean 0.4812\n"
            "Wall: 0.07 ms/step · 937.20K sample/s\n"
            "run: 0.32s · 4686 steps · batch 64\n");
  EXPECT_EQ(Summary().text(64, 0), "summary: no steps\n");
}

TEST(Summary, StateRoundTrips) {
  Summary a;
  a.load_state(spec_example_state());
  Summary b;
  b.load_state(a.state());
  EXPECT_EQ(b.state(), a.state());
  EXPECT_EQ(b.steps(), 4686);
  EXPECT_EQ(b.samples(), 299904);
  EXPECT_EQ(b.seconds(), 0.32);
  EXPECT_EQ(b.initial_loss(), 2.6558);
}

TEST(Summary, BadState) {
  Summary s;
  io::State st = spec_example_state();
  st.erase("loss_sum");
  EXPECT_KILN_ERROR(s.load_state(st), "[Summary] state has no 'loss_sum'");
  st = spec_example_state();
  st["steps"] = "-3";
  EXPECT_KILN_ERROR(s.load_state(st), "[Summary] state has steps -3");
  st = spec_example_state();
  st["seconds"] = "inf";
  EXPECT_KILN_ERROR(s.load_state(st), "[Summary] state 'seconds' is inf");
  EXPECT_EQ(s.steps(), 0);  // nothing changed
}

TEST(Summary, PrintedAtTrainEnd) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  auto summary = std::make_shared<Summary>();
  Trainer trainer(2, {summary}, {.out = &out, .tty = false});
  trainer.fit(s.task, s.loader);
  // Step losses 2, 1.75, ..., 0.75: mean 1.375.
  static const std::regex times(
      R"(Wall: \d+\.\d+ ms/step · p50 \d+\.\d{3} · p95 \d+\.\d{3} · \d+\.\d\d[KMGTP]? sample/s\nrun: \d+\.\d\ds)");
  EXPECT_EQ(std::regex_replace(out.str(), times, "<times>"),
            "summary: loss: initial 2.0000 · final 0.7500 · mean 1.3750\n"
            "<times> · 6 steps · batch 8\n");
  EXPECT_EQ(summary->steps(), 6);
  EXPECT_EQ(summary->samples(), 48);
  EXPECT_GT(summary->seconds(), 0);
  EXPECT_EQ(summary->latency().count(), 6);
  EXPECT_LE(summary->p50_ms(), summary->p95_ms());
}

// A task whose step k sleeps sleep_ms[k]: known lower bounds on each latency.
struct SleepyTask : testing::ScriptedTask {
  using ScriptedTask::ScriptedTask;
  std::vector<int> sleep_ms;
  StepResult training_step(const data::Batch& b) override {
    const size_t k = static_cast<size_t>(calls);
    if (k < sleep_ms.size()) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms[k]));
    return ScriptedTask::training_step(b);
  }
};

TEST(Summary, StepLatencyPercentilesFromARun) {
  // 6 steps; the last sleeps 40 ms, so p95 (nearest rank: the 6th smallest)
  // is at least that, while the median step only sleeps 1 ms.
  Rig<SleepyTask> s;
  s.task.sleep_ms = {1, 1, 1, 1, 1, 40};
  std::ostringstream out;
  auto summary = std::make_shared<Summary>();
  Trainer(2, {summary}, {.out = &out, .tty = false}).fit(s.task, s.loader);
  EXPECT_GE(summary->p95_ms(), 40.0 * 0.995);
  EXPECT_GE(summary->p50_ms(), 1.0 * 0.995);
  EXPECT_LT(summary->p50_ms(), summary->p95_ms());
  // The mean ms/step covers the same steps: at least (5 + 40) / 6.
  EXPECT_GE(summary->seconds() * 1e3 / 6, 45.0 / 6);
}

TEST(Summary, LatencyLineFormatAndOldStates) {
  // 100 steps of 1, 2, ..., 100 ms: nearest-rank p50 = 50 ms, p95 = 95 ms
  // (exact), printed within the histogram's 0.5%.
  LatencyHistogram h;
  for (int i = 1; i <= 100; ++i) h.add(i * 1e-3);
  Summary s;
  s.load_state({{"steps", "100"},
                {"samples", "6400"},
                {"seconds", "5.05"},
                {"loss_sum", "50"},
                {"initial_loss", "1"},
                {"final_loss", "0.25"},
                {"step_latency", h.str()}});
  EXPECT_NEAR(s.p50_ms(), 50.0, 50.0 * 0.005);
  EXPECT_NEAR(s.p95_ms(), 95.0, 95.0 * 0.005);
  const std::string text = s.text(64, 0);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(Wall: 50\.5 ms/step · p50 (\d+\.\d{3}) · p95 (\d+\.\d{3}) · 1\.27K sample/s\n)")))
      << text;
  EXPECT_NEAR(std::stod(m[1]), 50.0, 0.25);
  EXPECT_NEAR(std::stod(m[2]), 95.0, 0.475);
  // A state without latencies (written before they were recorded): no percentiles.
  io::State old = s.state();
  old.erase("step_latency");
  Summary t;
  t.load_state(old);
  EXPECT_TRUE(std::isnan(t.p50_ms()));
  EXPECT_EQ(t.text(64, 0).find("p50"), std::string::npos);
  // More latencies than steps, or a malformed entry, is an error; nothing changes.
  io::State bad = s.state();
  bad["steps"] = "99";
  EXPECT_KILN_ERROR(t.load_state(bad), "[Summary] state has 100 step latencies for 99 steps");
  bad = s.state();
  bad["step_latency"] = "3:1,x";
  EXPECT_KILN_ERROR(t.load_state(bad), "[Summary] latency histogram entry 'x' is not 'bin:count'");
  EXPECT_EQ(t.steps(), 100);
  EXPECT_EQ(t.latency().count(), 0);
}

TEST(LatencyHistogram, QuantilesWithinHalfAPercentOfTheExactOnes) {
  // Latencies spread over five decades (10 us .. 1 s), against the exact
  // nearest-rank percentiles of the sorted values.
  std::vector<double> v;
  Generator gen(3);
  Tensor u = rand({997}, gen, {.dtype = kF64});
  for (int64_t i = 0; i < 997; ++i) v.push_back(1e-5 * std::pow(1e5, u.data<double>()[i]));
  LatencyHistogram h;
  for (double x : v) h.add(x);
  std::sort(v.begin(), v.end());
  for (double q : {0.01, 0.5, 0.9, 0.95, 0.99, 1.0}) {
    const double exact = v[static_cast<size_t>(std::ceil(q * 997)) - 1];
    EXPECT_NEAR(h.quantile(q), exact, exact * 0.005) << "q " << q;
  }
  EXPECT_EQ(h.count(), 997);
  EXPECT_EQ(LatencyHistogram::parse(h.str(), "test"), h);
  // Zero (a coarse clock) and the empty histogram.
  LatencyHistogram z;
  EXPECT_TRUE(std::isnan(z.quantile(0.5)));
  EXPECT_EQ(z.str(), "");
  z.add(0.0);
  EXPECT_EQ(z.quantile(0.5), 0.0);
  EXPECT_EQ(z.str(), "-1:1");
  EXPECT_KILN_ERROR(z.add(-1e-3), "[LatencyHistogram] latency -0.001 s is not a duration >= 0");
  EXPECT_KILN_ERROR(z.quantile(0), "[LatencyHistogram] quantile 0 must be in (0, 1]");
  EXPECT_KILN_ERROR(LatencyHistogram::parse("5:2,5:1", "op"), "[op] latency histogram entry '5:1'");
  EXPECT_KILN_ERROR(LatencyHistogram::parse("5:0", "op"), "entry '5:0' is not 'bin:count'");
  EXPECT_KILN_ERROR(LatencyHistogram::parse("-2:3", "op"), "entry '-2:3'");
}

TEST(Summary, ASecondFreshFitCountsOnlyItself) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  auto summary = std::make_shared<Summary>();
  Trainer(2, {summary}, {.out = &out, .tty = false}).fit(s.task, s.loader);
  Trainer(1, {summary}, {.out = &out, .tty = false}).fit(s.task, s.loader);
  // The task's script goes on: steps 7-9 report 0.5, 0.25, 0.
  EXPECT_EQ(summary->steps(), 3);
  EXPECT_EQ(summary->samples(), 24);
  EXPECT_EQ(summary->initial_loss(), 0.5);
  EXPECT_EQ(summary->final_loss(), 0.0);
  EXPECT_EQ(summary->mean_loss(), 0.25);
}

TEST(Summary, TokensForSequenceWorkloads) {
  Rig<ScriptedTask> s;
  std::ostringstream out;
  Trainer trainer(1, {std::make_shared<Summary>()}, {.tokens_per_sample = 16, .out = &out, .tty = false});
  trainer.fit(s.task, s.loader);
  EXPECT_NE(out.str().find(" token/s\nrun: "), std::string::npos) << out.str();
  EXPECT_TRUE(out.str().ends_with(" · 3 steps · batch 8 · sequence 16 token/sample\n")) << out.str();
}

TEST(Summary, ResumedRunCoversTheWholeRun) {
  const std::string ckpt = kiln::testing::fresh_dir() + "/step-4.safetensors";
  Rig<> straight;
  auto full = std::make_shared<Summary>();
  std::ostringstream sink;
  Trainer(2, {full}, {.out = &sink, .tty = false}).fit(straight.task, straight.loader);

  {  // a leg that checkpoints at step 4 and dies after step 5
    Rig<> s;
    Trainer(2, {std::make_shared<Summary>(), std::make_shared<testing::SaveAt>(4, ckpt)},
            {.max_steps = 5, .out = &sink, .tty = false})
        .fit(s.task, s.loader);
  }
  Rig<> s;
  auto resumed = std::make_shared<Summary>();
  Trainer(2, {resumed}, {.out = &sink, .tty = false}).fit(s.task, s.loader, ckpt);
  EXPECT_EQ(resumed->steps(), 6);
  EXPECT_EQ(resumed->samples(), 48);
  EXPECT_EQ(resumed->initial_loss(), full->initial_loss());
  EXPECT_EQ(resumed->final_loss(), full->final_loss());
  EXPECT_EQ(resumed->mean_loss(), full->mean_loss());
}

}  // namespace
}  // namespace kiln::train
