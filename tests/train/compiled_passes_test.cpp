// The passes of a compiled step (docs/compile.md, NOTE [Buffers of a
// recording] in src/train/compiled_step.cpp): dead-op removal drops kernels
// whose outputs nothing reads, copy elision gives a gradient its producer's
// buffer as eager's AccumulateGrad does, the memory plan places the step's
// temporaries by lifetime in one arena. Each keeps the replay eager's bits.
#include <gtest/gtest.h>

#include <cstring>
#include <regex>

#include "kiln/core/allocator.h"
#include "kiln/core/parallel.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/pool.h"
#include "kiln/optim/sgd.h"
#include "kiln/nn/linear.h"
#include "kiln/optim/adam.h"
#include "kiln/train/compiled_step.h"
#include "tests/support/train_testing.h"

namespace kiln::train {
namespace {

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

void expect_bitwise(const Tensor& a, const Tensor& b, const std::string& what) {
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  ASSERT_EQ(va.size(), vb.size()) << what;
  for (size_t j = 0; j < va.size(); ++j) ASSERT_EQ(bits(va[j]), bits(vb[j])) << what << "[" << j << "]";
}

// The two models' parameters, bit for bit, in registration order.
void expect_parameters_bitwise(const nn::ParameterList& pe, const nn::ParameterList& pc) {
  ASSERT_EQ(pe.size(), pc.size());
  for (size_t k = 0; k < pe.size(); ++k) expect_bitwise(pe[k].value(), pc[k].value(), "parameter");
}

void expect_parameters_bitwise(const nn::Module& eager, const nn::Module& compiled) {
  expect_parameters_bitwise(eager.parameters(), compiled.parameters());
}

struct Mlp {
  Mlp()
      : rngs{{"params", 0}},
        net(nn::Linear(8, 32, rngs), nn::ReLU(), nn::Linear(32, 32, rngs), nn::ReLU(), nn::Linear(32, 4, rngs)),
        opt(net.parameters(), {.lr = 3e-3}) {}
  Rngs rngs;
  nn::Sequential net;
  optim::Adam opt;
};

std::vector<Tensor> batch(int64_t i, int64_t b = 16) {
  Generator gen(500 + uint64_t(i));
  return {randn({b, 8}, gen), randint(0, 4, {b}, gen)};
}

// A step with work nobody reads: the unused branch's kernels are dead.
std::vector<Tensor> step_with_dead_work(Mlp& m, const std::vector<Tensor>& in) {
  Tensor logits = m.net.forward(in[0]);
  {
    NoGradGuard no_grad;  // a diagnostic the caller never reads: dead
    Tensor unused = exp(logits);
    Tensor unused2 = sum(tanh(unused), {-1});  // reads only dead work: dead too
  }
  Tensor loss = cross_entropy(logits, in[1]);
  loss.backward();
  m.opt.step();
  m.opt.zero_grad();
  return {loss};
}

TEST(CompiledPasses, DeadLaunchesAreDroppedAndTheReplayStaysBitwise) {
  Mlp eager, compiled;
  CompiledStep step([&](const std::vector<Tensor>& in) { return step_with_dead_work(compiled, in); },
                    {.modules = {&compiled.net}});
  for (int64_t i = 0; i < 20; ++i) {
    float le = step_with_dead_work(eager, batch(i))[0].item<float>();
    float lc = step(batch(i))[0].item<float>();
    ASSERT_EQ(bits(le), bits(lc)) << "step " << i;
  }
  expect_parameters_bitwise(eager.net, compiled.net);
  const PassReport* dead = step.evidence().find("DeadOpRemoval");
  ASSERT_NE(dead, nullptr);
  EXPECT_EQ(dead->status, PassStatus::Applied) << dead->detail;
  // exp, tanh, sum: three dead launches (the backward's gradient copies are
  // elided too).
  EXPECT_EQ(std::stoi(dead->detail), 3) << dead->detail;
  EXPECT_NE(dead->detail.find("6 gradient copies elided"), std::string::npos) << dead->detail;
}

TEST(CompiledPasses, ElidedGradientCopiesLeaveEagerGradientsAndNoAliasing) {
  // Two leaves fed the same gradient by an add (the backward passes one
  // tensor to both): eager copies it for the first and keeps it for the
  // second, so the two gradients are distinct buffers. Left assigned after
  // the step (no zero_grad), they must equal eager's and stay distinct.
  Rngs rngs{{"params", 3}};
  auto make = [&](uint64_t seed) {
    Generator g(seed);
    Tensor a = randn({4, 8}, g), b = randn({4, 8}, g);
    a.requires_grad_();
    b.requires_grad_();
    return std::pair{a, b};
  };
  auto [ae, be] = make(7);
  auto [ac, bc] = make(7);
  auto body = [](const Tensor& a, const Tensor& b, const Tensor& x) {
    Tensor loss = sum(mul(add(a, b), x));
    loss.backward();
    return loss;
  };
  CompiledStep step([&](const std::vector<Tensor>& in) {
    Tensor loss = body(ac, bc, in[0]);
    return std::vector<Tensor>{loss};
  });
  for (int64_t i = 0; i < 3; ++i) {
    Generator g(40 + uint64_t(i));
    Tensor x = randn({4, 8}, g);
    ae.set_grad(Tensor());
    be.set_grad(Tensor());
    ac.set_grad(Tensor());
    bc.set_grad(Tensor());
    body(ae, be, x);
    step({x});
    expect_bitwise(ae.grad(), ac.grad(), "a.grad");
    expect_bitwise(be.grad(), bc.grad(), "b.grad");
    EXPECT_NE(ac.grad().storage().get(), bc.grad().storage().get()) << "the two gradients alias";
  }
}

TEST(CompiledPasses, MemoryPlanPlacesTemporariesInOneArenaAndAllocatesNothing) {
  Mlp eager, compiled;
  auto body = [](Mlp& m, const std::vector<Tensor>& in) {
    Tensor loss = cross_entropy(m.net.forward(in[0]), in[1]);
    loss.backward();
    m.opt.step();
    m.opt.zero_grad();
    return std::vector<Tensor>{loss};
  };
  CompiledStep step([&](const std::vector<Tensor>& in) { return body(compiled, in); }, {.modules = {&compiled.net}});
  step(batch(0));
  body(eager, batch(0));
  const CaptureEvidence& ev = step.evidence();
  const PassReport* plan = ev.find("MemoryPlanning");
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->status, PassStatus::Applied) << plan->detail;
  EXPECT_NE(plan->detail.find("one "), std::string::npos) << plan->detail;
  // Every gradient copy elided (AccumulateGrad's clone while recording).
  const PassReport* dead = ev.find("DeadOpRemoval");
  EXPECT_NE(dead->detail.find("6 gradient copies elided"), std::string::npos) << dead->detail;
  for (int64_t i = 1; i < 30; ++i) {
    float lc = step(batch(i))[0].item<float>();
    float le = body(eager, batch(i))[0].item<float>();
    ASSERT_EQ(bits(le), bits(lc)) << "step " << i;
  }
  expect_parameters_bitwise(eager.net, compiled.net);
}


TEST(CompiledPasses, UpdateGuardedStepIsBitwiseEager) {
  Mlp eager, compiled;
  auto body = [](Mlp& m, const std::vector<Tensor>& in) {
    Tensor loss = cross_entropy(m.net.forward(in[0]), in[1]);
    return std::vector<Tensor>{loss, update_guarded(loss, m.opt)};
  };
  CompiledStep step([&](const std::vector<Tensor>& in) { return body(compiled, in); }, {.modules = {&compiled.net}});
  for (int64_t i = 0; i < 10; ++i) {
    std::vector<Tensor> oc = step(batch(i));
    std::vector<Tensor> oe = body(eager, batch(i));
    ASSERT_EQ(bits(oe[0].item<float>()), bits(oc[0].item<float>())) << "step " << i;
    EXPECT_TRUE(oc[1].item<bool>());
  }
  expect_parameters_bitwise(eager.net, compiled.net);
}

// Fusion: each linear whose output only feeds an activation that saves its
// output (relu, tanh, sigmoid) becomes one launch writing the activation's
// buffer; gelu and silu save their input, so those pairs are kept. 100 steps
// of Adam bitwise eager, parameters and losses.
struct ActNet {
  ActNet()
      : rngs{{"params", 1}},
        net(nn::Linear(8, 32, rngs), nn::ReLU(), nn::Linear(32, 32, rngs), nn::Tanh(), nn::Linear(32, 24, rngs),
            nn::Sigmoid(), nn::Linear(24, 16, rngs), nn::GELU(), nn::Linear(16, 16, rngs), nn::SiLU(),
            nn::Linear(16, 4, rngs)),
        opt(net.parameters(), {.lr = 1e-2}) {}
  Rngs rngs;
  nn::Sequential net;
  optim::Adam opt;
};

std::vector<Tensor> act_step(ActNet& m, const std::vector<Tensor>& in) {
  Tensor logits = m.net.forward(in[0]);
  Tensor loss = cross_entropy(logits, in[1]);
  loss.backward();
  m.opt.step();
  m.opt.zero_grad();
  return {loss, logits};
}

TEST(CompiledPasses, FusionFoldsLinearActivationPairsAndStaysBitwise) {
  ActNet eager, compiled;
  CompiledStep step([&](const std::vector<Tensor>& in) { return act_step(compiled, in); },
                    {.modules = {&compiled.net}});
  for (int64_t i = 0; i < 100; ++i) {
    std::vector<Tensor> e = act_step(eager, batch(i, 64)), c = step(batch(i, 64));
    ASSERT_EQ(bits(e[0].item<float>()), bits(c[0].item<float>())) << "step " << i;
    if (i % 10 == 0) expect_bitwise(e[1], c[1], "logits");
  }
  EXPECT_EQ(step.replays(), 100 - step.recordings());
  expect_parameters_bitwise(eager.net, compiled.net);
  const PassReport* f = step.evidence().find("Fusion");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->status, PassStatus::Applied) << f->detail;
  EXPECT_EQ(f->detail.rfind("3 linear + activation pairs fused", 0), 0u) << f->detail;
  EXPECT_NE(f->detail.find("relu x1, sigmoid x1, tanh x1"), std::string::npos) << f->detail;
  EXPECT_NE(f->detail.find("2 pairs kept"), std::string::npos) << f->detail;
  EXPECT_NE(f->detail.find("Rejected: oneDNN eltwise post-ops"), std::string::npos) << f->detail;
}

// Two linears and Adam; `mix`, the op between them, is what a test varies.
struct TwoLinears {
  using Mix = Tensor (*)(const Tensor& h);
  TwoLinears(int64_t seed, Mix mix)
      : mix(mix), rngs{{"params", seed}}, l1(8, 16, rngs), l2(16, 4, rngs), opt(params(), {.lr = 1e-2}) {}
  nn::ParameterList params() {
    std::vector<nn::Parameter> p = l1.parameters().params();
    for (const nn::Parameter& q : l2.parameters()) p.push_back(q);
    return p;
  }
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    Tensor loss = cross_entropy(l2.forward(mix(l1.forward(in[0]))), in[1]);
    loss.backward();
    opt.step();
    opt.zero_grad();
    return {loss};
  }
  Mix mix;
  Rngs rngs;
  nn::Linear l1, l2;
  optim::Adam opt;
};

// A pre-activation read again after its activation (here by a residual
// term) keeps its buffer: that pair is not fused, the replay stays eager's.
Tensor residual_mix(const Tensor& h) { return relu(h) + 0.5 * h; }

TEST(CompiledPasses, FusionKeepsAPreActivationReadAgain) {
  TwoLinears eager(2, residual_mix), compiled(2, residual_mix);
  CompiledStep step([&](const std::vector<Tensor>& in) { return compiled.step(in); });
  for (int64_t i = 0; i < 20; ++i)
    ASSERT_EQ(bits(eager.step(batch(i))[0].item<float>()), bits(step(batch(i))[0].item<float>())) << i;
  const PassReport* f = step.evidence().find("Fusion");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->status, PassStatus::Analyzed) << f->detail;
  expect_parameters_bitwise(eager.params(), compiled.params());
}

// Elementwise chains: a no-grad target (linear -> neg -> exp -> * 0.5 ->
// + 1, as an RL target network's) runs as one launch, the linear fused with
// it; on the gradient path relu's output is saved (not an intermediate),
// but the scalar links after it chain, and so do their gradients' in the
// backward. 50 Adam steps bitwise, the target included.
struct ChainNet {
  ChainNet() : rngs{{"params", 3}}, l1(8, 16, rngs), l2(16, 4, rngs), target(8, 4, rngs), opt(params(), {.lr = 1e-2}) {}
  nn::ParameterList params() {
    std::vector<nn::Parameter> p = l1.parameters().params();
    for (const nn::Parameter& q : l2.parameters()) p.push_back(q);
    return p;
  }
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    Tensor y;
    {
      NoGradGuard no_grad;
      y = exp(neg(target.forward(in[0]))) * 0.5 + 1.0;
    }
    Tensor h = (relu(l1.forward(in[0])) * 2.0 - 1.0) / 3.0;
    Tensor loss = mse_loss(l2.forward(h), y);
    loss.backward();
    opt.step();
    opt.zero_grad();
    return {loss, y};
  }
  Rngs rngs;
  nn::Linear l1, l2, target;
  optim::Adam opt;
};

TEST(CompiledPasses, ElementwiseChainsRunAsOneLaunchAndStayBitwise) {
  ChainNet eager, compiled;
  CompiledStep step([&](const std::vector<Tensor>& in) { return compiled.step(in); });
  for (int64_t i = 0; i < 50; ++i) {
    std::vector<Tensor> e = eager.step(batch(i)), c = step(batch(i));
    ASSERT_EQ(bits(e[0].item<float>()), bits(c[0].item<float>())) << i;
    expect_bitwise(e[1], c[1], "target");
  }
  EXPECT_EQ(step.replays(), 50 - step.recordings());
  expect_parameters_bitwise(eager.params(), compiled.params());
  const PassReport* f = step.evidence().find("Fusion");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->status, PassStatus::Applied) << f->detail;
  // neg, exp, * 0.5, + 1 (4 launches), * 2, - 1, / 3 (3) and, in the
  // backward, the gradient's / 3 then * 2 (2): three chains. The target's
  // linear then fuses with its chain, l1 with its relu.
  EXPECT_EQ(f->detail.rfind("3 elementwise chains (9 launches)", 0), 0u) << f->detail;
  EXPECT_NE(f->detail.find("2 linear + activation pairs fused into one launch each (elementwise chain x1, relu x1)"),
            std::string::npos)
      << f->detail;
}

TEST(CompiledPasses, FusionOffRunsEveryLaunchAsRecorded) {
  ActNet eager, compiled;
  CompiledStep step([&](const std::vector<Tensor>& in) { return act_step(compiled, in); },
                    {.modules = {&compiled.net}, .fusion = false});
  for (int64_t i = 0; i < 5; ++i)
    ASSERT_EQ(bits(act_step(eager, batch(i, 64))[0].item<float>()), bits(step(batch(i, 64))[0].item<float>()));
  const PassReport* f = step.evidence().find("Fusion");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->status, PassStatus::NotRun) << f->detail;
}


// Convolution + activation: a conv2d whose output only feeds an activation
// that saves its output (relu, tanh) becomes one launch: the convolution
// writes the activation's buffer, kiln's activation kernel runs in place on
// it. With `residual`, the second convolution's output is read again after
// its relu (relu(h) + 0.5 h): that pair is kept, the first still fused.
struct ConvNet {
  ConvNet()
      : rngs{{"params", 4}},
        c1(2, 16, 3, rngs, {.padding = 1}),
        c2(16, 16, 3, rngs, {.padding = 1}),
        fc(16 * 6 * 6, 4, rngs),
        opt(params(), {.lr = 1e-2}) {}
  nn::ParameterList params() {
    std::vector<nn::Parameter> p;
    for (nn::Module* m : std::initializer_list<nn::Module*>{&c1, &c2, &fc})
      for (const nn::Parameter& q : m->parameters()) p.push_back(q);
    return p;
  }
  std::vector<Tensor> step(const std::vector<Tensor>& in, bool residual) {
    Tensor h = relu(c1.forward(in[0]));                      // [8, 16, 6, 6]
    Tensor h2 = c2.forward(h);                               // [8, 16, 6, 6]
    Tensor a = residual ? relu(h2) + 0.5 * h2 : tanh(h2);
    Tensor loss = cross_entropy(fc.forward(flatten(a, 1)), in[1]);
    loss.backward();
    opt.step();
    opt.zero_grad();
    return {loss};
  }
  Rngs rngs;
  nn::Conv2d c1, c2;
  nn::Linear fc;
  optim::Adam opt;
};

std::vector<Tensor> planes(int64_t i) {
  Generator gen(700 + uint64_t(i));
  return {randn({8, 2, 6, 6}, gen), randint(0, 4, {8}, gen)};
}

int64_t count_before(const std::string& detail, const std::string& what) {
  std::smatch m;
  if (!std::regex_search(detail, m, std::regex("(\\d+) " + what))) return -1;
  return std::stoll(m[1].str());
}

void run_conv_net(bool residual, int64_t steps, CompiledStep& step, ConvNet& eager, ConvNet& compiled) {
  for (int64_t i = 0; i < steps; ++i)
    ASSERT_EQ(bits(eager.step(planes(i), residual)[0].item<float>()), bits(step(planes(i))[0].item<float>()))
        << "step " << i << "\n" << step.evidence().str();
  expect_parameters_bitwise(eager.params(), compiled.params());
}

TEST(CompiledPasses, FusionFoldsConvActivationPairsAndStaysBitwise) {
  set_num_threads(1);  // the thread count is part of oneDNN's convolution plan: keep one for both runs
  ConvNet eager, compiled;
  CompiledStep step([&](const std::vector<Tensor>& in) { return compiled.step(in, false); });
  run_conv_net(false, 100, step, eager, compiled);
  EXPECT_EQ(step.replays(), 100 - step.recordings());
  const PassReport* f = step.evidence().find("Fusion");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->status, PassStatus::Applied) << f->detail;
  EXPECT_NE(f->detail.find("2 convolution + activation pairs fused into one launch each (conv2d+relu x1, "
                           "conv2d+tanh x1)"),
            std::string::npos)
      << f->detail;
  EXPECT_NE(f->detail.find("0 pairs kept"), std::string::npos) << f->detail;
  // The backward's relu and tanh gradients are written over a dead input
  // (the saved activation or the incoming gradient): NOTE [Outputs in place
  // of dead inputs].
  const PassReport* plan = step.evidence().find("MemoryPlanning");
  ASSERT_NE(plan, nullptr);
  EXPECT_GE(count_before(plan->detail, "elementwise outputs written over"), 2) << plan->detail;
  use_default_threads();
}

TEST(CompiledPasses, FusionKeepsAConvPreActivationReadAgain) {
  set_num_threads(1);
  ConvNet eager, compiled;
  CompiledStep step([&](const std::vector<Tensor>& in) { return compiled.step(in, true); });
  run_conv_net(true, 20, step, eager, compiled);
  const PassReport* f = step.evidence().find("Fusion");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->detail.find("1 convolution + activation pairs fused into one launch each (conv2d+relu x1)"),
            std::string::npos)
      << f->detail;
  EXPECT_NE(f->detail.find("1 pairs kept"), std::string::npos) << f->detail;
  use_default_threads();
}

// The memory plan's in-place outputs on the MLP: each relu's gradient
// (relu_backward of the incoming gradient and the saved output, both read
// for the last time) takes one of their places; 30 steps bitwise.
TEST(CompiledPasses, MemoryPlanWritesElementwiseOutputsOverDeadInputs) {
  Mlp eager, compiled;
  auto body = [](Mlp& m, const std::vector<Tensor>& in) {
    Tensor loss = cross_entropy(m.net.forward(in[0]), in[1]);
    loss.backward();
    m.opt.step();
    m.opt.zero_grad();
    return std::vector<Tensor>{loss};
  };
  CompiledStep step([&](const std::vector<Tensor>& in) { return body(compiled, in); }, {.modules = {&compiled.net}});
  for (int64_t i = 0; i < 30; ++i)
    ASSERT_EQ(bits(body(eager, batch(i))[0].item<float>()), bits(step(batch(i))[0].item<float>())) << i;
  const PassReport* plan = step.evidence().find("MemoryPlanning");
  ASSERT_NE(plan, nullptr);
  EXPECT_GE(count_before(plan->detail, "elementwise outputs written over"), 2) << plan->detail;
  expect_parameters_bitwise(eager.net, compiled.net);
}


// The step's autograd graph is released after the recording: max pooling's
// argmax taps (u8 [16, 16, 4, 4], 4096 bytes), captured by its vjp besides
// its saved tensors, are a temporary of the arena, not a buffer held from
// outside. What stays outside is the parameters (and at most their
// gradients), the recorded inputs and the loss.
TEST(CompiledPasses, StepGraphReleasedSoMaxPoolTapsArePlanned) {
  set_num_threads(1);
  Rngs rngs{{"params", 5}};
  nn::Sequential net(nn::Conv2d(1, 16, 3, rngs, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                     nn::Linear(16 * 4 * 4, 3, rngs));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  CompiledStep step(
      [&](const std::vector<Tensor>& in) {
        Tensor loss = cross_entropy(net.forward(in[0]), in[1]);
        loss.backward();
        opt.step();
        opt.zero_grad();
        return std::vector<Tensor>{loss};
      },
      {.modules = {&net}});
  Generator gen(11);
  step({randn({16, 1, 8, 8}, gen), randint(0, 3, {16}, gen)});
  int64_t param_bytes = 0;
  for (const nn::Parameter& p : net.parameters()) param_bytes += p.value().nbytes();
  const PassReport* plan = step.evidence().find("MemoryPlanning");
  ASSERT_NE(plan, nullptr);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(plan->detail, m, std::regex("stay where they are \\((\\d+) bytes"))) << plan->detail;
  const int64_t kept = std::stoll(m[1].str());
  // params (+ gradients) + inputs (4096 + 128 bytes) + loss, and a little slack: below the taps' 4096.
  EXPECT_LT(kept, 2 * param_bytes + 4096 + 128 + 4 + 256) << plan->detail;
  EXPECT_GE(kept, param_bytes + 4096 + 128) << plan->detail;
  use_default_threads();
}


// h + h^T reads h at (i, j) and (j, i): its output must not be written over
// h even though h is read there for the last time (the other operand is a
// view of h's buffer at other indices). 20 steps bitwise.
Tensor symmetric_mix(const Tensor& h) { return h + transpose(h, 0, 1); }  // h [16, 16]

TEST(CompiledPasses, MemoryPlanKeepsAnInputAnotherOperandReadsElsewhere) {
  TwoLinears eager(6, symmetric_mix), compiled(6, symmetric_mix);
  CompiledStep step([&](const std::vector<Tensor>& in) { return compiled.step(in); });
  for (int64_t i = 0; i < 20; ++i)
    ASSERT_EQ(bits(eager.step(batch(i))[0].item<float>()), bits(step(batch(i))[0].item<float>())) << i;
  expect_parameters_bitwise(eager.params(), compiled.params());
}

}  // namespace
}  // namespace kiln::train
