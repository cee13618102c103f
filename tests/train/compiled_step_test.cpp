// CompiledStep (kiln/train/compiled_step.h): a recorded-then-replayed step
// gives eager's bits, step after step; what changes between steps (learning
// rate, Adam's step count, dropout's generator) is read live; a new signature
// records again; a host read rejects the recording by name and the step stays
// eager and correct.
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/core/allocator.h"
#include "kiln/core/replay.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/linear.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/schedulers.h"
#include "kiln/train/compiled_step.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

using Mode = CompiledStep::Mode;

// The MLP of the first target: Linear, ReLU, Dropout, Linear with
// AdamW and a cosine schedule. Built from seeds only, so two are identical.
struct Mlp {
  explicit Mlp(double dropout = 0.25)
      : rngs{{"params", 0}, {"dropout", 1}},
        net(nn::Linear(8, 16, rngs), nn::ReLU(), nn::Dropout(dropout, rngs), nn::Linear(16, 4, rngs)),
        opt(net.parameters(), {.lr = 3e-3, .weight_decay = 0.05}),
        sched({.max_lr = 3e-3, .min_lr = 1e-4, .total_steps = 100}) {}

  // One training step: the body both runs use, eager or compiled.
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    Tensor loss = cross_entropy(net.forward(in[0]), in[1]);
    loss.backward();
    opt.step();
    opt.zero_grad();
    return {loss};
  }

  Rngs rngs;
  nn::Sequential net;
  optim::AdamW opt;
  optim::CosineScheduler sched;
};

// Batch i of a fixed stream: x [b, 8], y [b] in [0, 4).
std::vector<Tensor> batch(int64_t i, int64_t b = 16) {
  Generator gen(1000 + uint64_t(i));
  return {randn({b, 8}, gen), randint(0, 4, {b}, gen)};
}

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

void expect_same_parameters(nn::Module& a, nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    std::vector<float> va = pa[i].second.value().to_vector<float>(), vb = pb[i].second.value().to_vector<float>();
    ASSERT_EQ(va.size(), vb.size());
    for (size_t j = 0; j < va.size(); ++j) ASSERT_EQ(bits(va[j]), bits(vb[j])) << pa[i].first << "[" << j << "]";
  }
}

TEST(CompiledStep, MlpAdamWCosineDropoutIsBitwiseEagerOver100Steps) {
  Mlp eager, compiled;
  CompiledStep step([&](const std::vector<Tensor>& in) { return compiled.step(in); }, {.modules = {&compiled.net}});
  for (int64_t i = 0; i < 100; ++i) {
    eager.sched.apply(eager.opt);
    compiled.sched.apply(compiled.opt);
    float le = eager.step(batch(i))[0].item<float>();
    float lc = step(batch(i))[0].item<float>();
    ASSERT_EQ(bits(le), bits(lc)) << "step " << i;
    EXPECT_EQ(step.last_mode(), i == 0 ? Mode::Recorded : Mode::Replayed);
    eager.sched.step();
    compiled.sched.step();
  }
  expect_same_parameters(eager.net, compiled.net);
  EXPECT_EQ(step.recordings(), 1);
  EXPECT_EQ(step.replays(), 99);
  // The host-visible state a checkpoint holds stays aligned: Adam's step
  // count and the dropout generator's offset advanced with every replay.
  EXPECT_EQ(compiled.opt.step_count(), 100);
  EXPECT_EQ(eager.opt.step_count(), 100);
  auto ge = eager.net.named_generators(), gc = compiled.net.named_generators();
  ASSERT_EQ(ge.size(), 1u);
  EXPECT_EQ(ge[0].second->offset(), gc[0].second->offset());
  EXPECT_GT(gc[0].second->offset(), 0u);
  // The evidence names every pass.
  const CaptureEvidence& ev = step.evidence();
  EXPECT_TRUE(ev.replayable);
  for (const char* stage : {"SemanticValidation", "ReplaySafety", "DeadOpRemoval", "Fusion", "MemoryPlanning",
                            "KernelSelection", "CommandRecording"})
    EXPECT_NE(ev.find(stage), nullptr) << stage;
  EXPECT_EQ(ev.find("ReplaySafety")->status, PassStatus::Applied);
  EXPECT_EQ(ev.find("DeadOpRemoval")->status, PassStatus::Applied);  // the gradient copies elided
  EXPECT_EQ(ev.find("MemoryPlanning")->status, PassStatus::Applied);
  EXPECT_GT(ev.launches, 10);
  EXPECT_NE(ev.str().find("CommandRecording"), std::string::npos);
}

TEST(CompiledStep, ReplayAllocatesNoTensorMemory) {
  Mlp eager, compiled;
  CompiledStep step([&](const std::vector<Tensor>& in) { return compiled.step(in); }, {.modules = {&compiled.net}});
  std::vector<std::vector<Tensor>> batches;
  for (int64_t i = 0; i < 6; ++i) batches.push_back(batch(i));
  step(batches[0]);
  eager.step(batches[0]);
  const int64_t before = memory_stats().alloc_count;
  for (int64_t i = 1; i < 6; ++i) step(batches[i]);
  EXPECT_EQ(step.replays(), 5);
  EXPECT_EQ(memory_stats().alloc_count - before, 0) << "a replay reached the allocator";
  const int64_t eager_before = memory_stats().alloc_count;
  for (int64_t i = 1; i < 6; ++i) eager.step(batches[i]);
  EXPECT_GT(memory_stats().alloc_count - eager_before, 5 * 10) << "eager allocates every intermediate";
  expect_same_parameters(eager.net, compiled.net);
}

TEST(CompiledStep, LearningRateChangedBetweenStepsTakesEffectWithoutRecordingAgain) {
  Mlp eager, compiled;
  CompiledStep step([&](const std::vector<Tensor>& in) { return compiled.step(in); }, {.modules = {&compiled.net}});
  for (int64_t i = 0; i < 30; ++i) {
    const double lr = i < 10 ? 1e-3 : (i < 20 ? 5e-2 : 0.0);  // a live-control change, then a freeze
    eager.opt.set("lr", lr);
    compiled.opt.set("lr", lr);
    float le = eager.step(batch(i))[0].item<float>();
    float lc = step(batch(i))[0].item<float>();
    ASSERT_EQ(bits(le), bits(lc)) << "step " << i;
  }
  expect_same_parameters(eager.net, compiled.net);
  EXPECT_EQ(step.recordings(), 1);
  EXPECT_EQ(step.replays(), 29);
  // lr 0 froze the weights: the replay did read the new value (a baked lr
  // would have kept training).
  Tensor w = compiled.net.named_parameters()[0].second.value().clone();
  step(batch(99));
  Tensor w2 = compiled.net.named_parameters()[0].second.value();
  // AdamW's decay is lr * wd = 0 too: nothing moved.
  EXPECT_EQ(w.to_vector<float>(), w2.to_vector<float>());
}

TEST(CompiledStep, NewSignatureRecordsAgainAndOldOneStillReplays) {
  Mlp eager, compiled;
  CompiledStep step([&](const std::vector<Tensor>& in) { return compiled.step(in); }, {.modules = {&compiled.net}});
  // Batch sizes 16, 16, 8, 8, 16, then eval mode (dropout off), then train.
  const int64_t sizes[] = {16, 16, 8, 8, 16, 16, 16, 16};
  const bool train[] = {true, true, true, true, true, false, false, true};
  const Mode want[] = {Mode::Recorded, Mode::Replayed, Mode::Recorded, Mode::Replayed,
                       Mode::Replayed, Mode::Recorded, Mode::Replayed, Mode::Replayed};
  for (int64_t i = 0; i < 8; ++i) {
    eager.net.train(train[i]);
    compiled.net.train(train[i]);
    float le = eager.step(batch(i, sizes[i]))[0].item<float>();
    float lc = step(batch(i, sizes[i]))[0].item<float>();
    ASSERT_EQ(bits(le), bits(lc)) << "step " << i;
    EXPECT_EQ(step.last_mode(), want[i]) << "step " << i;
  }
  expect_same_parameters(eager.net, compiled.net);
  EXPECT_EQ(step.recordings(), 3);
  // A dtype change is a new signature too.
  std::vector<Tensor> b = batch(9);
  b[1] = to(b[1], kI32);
  EXPECT_EQ(eager.step(b)[0].item<float>(), step(b)[0].item<float>());
  EXPECT_EQ(step.last_mode(), Mode::Recorded);
  // Recapture drops every recording.
  step.request_recapture();
  step(batch(10));
  eager.step(batch(10));
  EXPECT_EQ(step.last_mode(), Mode::Recorded);
  expect_same_parameters(eager.net, compiled.net);
}

TEST(CompiledStep, GradientsAccumulatedOverCallsAddToTheLiveGradient) {
  // Gradient accumulation: the step only runs backward; the update comes
  // after every 3 calls, outside. The first call assigns gradients, later
  // ones add: two signatures, and the adding one must read the live grad().
  Mlp eager(0.0), compiled(0.0);
  auto body = [](Mlp& m, const std::vector<Tensor>& in) {
    Tensor loss = cross_entropy(m.net.forward(in[0]), in[1]);
    loss.backward();
    return std::vector<Tensor>{loss};
  };
  CompiledStep step([&](const std::vector<Tensor>& in) { return body(compiled, in); }, {.modules = {&compiled.net}});
  for (int64_t i = 0; i < 12; ++i) {
    float le = body(eager, batch(i))[0].item<float>();
    float lc = step(batch(i))[0].item<float>();
    ASSERT_EQ(bits(le), bits(lc)) << "call " << i;
    if (i % 3 == 2) {
      eager.opt.step();
      eager.opt.zero_grad();
      compiled.opt.step();
      compiled.opt.zero_grad();
    }
  }
  expect_same_parameters(eager.net, compiled.net);
  EXPECT_EQ(step.recordings(), 2);
  EXPECT_EQ(step.replays(), 10);
}

TEST(CompiledStep, ItemInsideTheStepIsRejectedByNameAndRunsEagerly) {
  Mlp eager, compiled;
  double seen = 0;
  auto body = [&](Mlp& m, const std::vector<Tensor>& in) {
    Tensor loss = cross_entropy(m.net.forward(in[0]), in[1]);
    seen = loss.item<double>();  // a host read inside the step
    if (seen > 100) loss = loss * 0;  // data-dependent control flow
    loss.backward();
    m.opt.step();
    m.opt.zero_grad();
    return std::vector<Tensor>{loss};
  };
  CompiledStep step([&](const std::vector<Tensor>& in) { return body(compiled, in); }, {.modules = {&compiled.net}});
  for (int64_t i = 0; i < 12; ++i) {
    float le = body(eager, batch(i))[0].item<float>();
    float lc = step(batch(i))[0].item<float>();
    ASSERT_EQ(bits(le), bits(lc)) << "step " << i;
    EXPECT_EQ(step.last_mode(), Mode::Eager) << "step " << i;
  }
  expect_same_parameters(eager.net, compiled.net);
  EXPECT_EQ(step.recordings(), 1);
  EXPECT_EQ(step.eager_calls(), 11);
  const CaptureEvidence& ev = step.evidence();
  EXPECT_FALSE(ev.replayable);
  ASSERT_NE(ev.find("SemanticValidation"), nullptr);
  EXPECT_EQ(ev.find("SemanticValidation")->status, PassStatus::Rejected);
  EXPECT_NE(ev.find("SemanticValidation")->detail.find("item()"), std::string::npos) << ev.str();
  EXPECT_EQ(ev.find("CommandRecording")->status, PassStatus::NotRun);
  EXPECT_NE(ev.str().find("rejected, runs eagerly"), std::string::npos);
}

TEST(CompiledStep, RandomOpOnAGeneratorItWasNotGivenIsRejected) {
  Mlp m(0.0);
  Generator noise(5);
  CompiledStep step([&](const std::vector<Tensor>& in) {
    Tensor x = in[0] + randn(in[0].shape(), noise);  // `noise` is not in CompileOptions
    return m.step({x, in[1]});
  }, {.modules = {&m.net}});
  step(batch(0));
  ASSERT_FALSE(step.evidence().replayable);
  EXPECT_EQ(step.evidence().find("ReplaySafety")->status, PassStatus::Rejected);
  EXPECT_NE(step.evidence().find("ReplaySafety")->detail.find("randn"), std::string::npos);
  // Given the generator, the same step replays and draws fresh noise each time.
  Mlp e(0.0), c(0.0);
  Generator ne(5), nc(5);
  CompiledStep ok([&](const std::vector<Tensor>& in) { return c.step({in[0] + randn(in[0].shape(), nc), in[1]}); },
                  {.modules = {&c.net}, .generators = {&nc}});
  for (int64_t i = 0; i < 5; ++i) {
    float le = e.step({batch(i)[0] + randn({16, 8}, ne), batch(i)[1]})[0].item<float>();
    float lc = ok(batch(i))[0].item<float>();
    ASSERT_EQ(bits(le), bits(lc)) << "step " << i;
  }
  EXPECT_EQ(ok.replays(), 4);
  EXPECT_EQ(ne.offset(), nc.offset());
}

TEST(CompiledStep, BadArgumentsAreErrors) {
  EXPECT_THROW(CompiledStep(CompiledStep::Fn()), Error);
  Mlp m;
  CompiledStep step([&](const std::vector<Tensor>& in) { return m.step(in); }, {.modules = {&m.net}});
  try {
    step({Tensor(), Tensor()});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CompiledStep"), std::string::npos) << e.what();
  }
  EXPECT_THROW(CompiledStep([](const std::vector<Tensor>&) { return std::vector<Tensor>{}; }, {.modules = {nullptr}}),
               Error);
  // An error inside the step leaves no recording: the next call records.
  EXPECT_THROW(step({randn({4, 8}, *std::make_unique<Generator>(0)), tensor(std::vector<int64_t>{0, 1, 2, 9})}), Error);
  EXPECT_EQ(step.recordings(), 0);
  EXPECT_FALSE(replay::recording());
}

}  // namespace
}  // namespace kiln::train
