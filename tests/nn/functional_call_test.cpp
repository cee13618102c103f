// functional_call (spec 000's split/merge boundary): outputs with substituted
// parameters against the ops written out, gradients to the substitutes
// (analytic and finite differences in f64), a second-order inner step, the
// module untouched afterwards (also when forward throws), and the errors.
// Legend: B batch, I/H/O widths.
#include "kiln/nn/functional_call.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "kiln/autograd/functional.h"
#include "kiln/nn/linear.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "tests/support/nn_testing.h"

namespace kiln::nn {
namespace {
using namespace testing;

Init f64_init(Rngs& rngs) {
  Init init(rngs);
  init.dtype = kF64;
  init.bias = init::uniform(-0.5, 0.5);
  return init;
}

// x [B, 3] -> tanh(fc1) [B, 4] -> fc2 [B, 2].
struct Mlp : Module {
  Shared<Linear> fc1, fc2;
  explicit Mlp(const Init& init)
      : fc1(register_module("fc1", Linear(3, 4, init))), fc2(register_module("fc2", Linear(4, 2, init))) {}
  Tensor forward(const Tensor& x) const { return fc2(tanh(fc1(x))); }
};

// Uses its weight, then throws: the substitution must still be undone.
struct Thrower : Module {
  Parameter weight;
  Thrower() : weight(register_parameter("weight", ones({2}))) {}
  Tensor forward(const Tensor& x) const {
    Tensor y = mul(x, weight);
    throw std::runtime_error("forward failed after reading weight " + to_string(y.shape()));
  }
};

Tensor random(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  return randn(s, gen, {.dtype = kF64});
}

TEST(FunctionalCall, OutputsUseTheSubstitutesAndTheModuleIsUnchanged) {
  Rngs rngs(0);
  Mlp m(f64_init(rngs));
  const Tensor w1 = m.fc1->weight.value(), b2 = m.fc2->bias.value();
  const Tensor w1_before = clone(w1);
  Tensor x = random({5, 3}, 1), W1 = random({4, 3}, 2), B1 = random({4}, 3), W2 = random({2, 4}, 4);
  // All of fc1 and fc2's weight substituted; fc2.bias is the module's own.
  Tensor y = functional_call(m, {{"fc1.weight", W1}, {"fc1.bias", B1}, {"fc2.weight", W2}}, x);
  EXPECT_TRUE(all_close(y, linear(tanh(linear(x, W1, B1)), W2, b2), 1e-14, 1e-14));
  // The module is as it was: the same tensors, the same values.
  EXPECT_TRUE(m.fc1->weight.value().is_same(w1));
  EXPECT_TRUE(equal(m.fc1->weight.value(), w1_before));
  EXPECT_TRUE(all_close(m.forward(x), linear(tanh(linear(x, w1, m.fc1->bias)), m.fc2->weight, b2), 1e-14, 1e-14));
  // No substitutes: the module's own forward; through a Shared<M> too.
  Shared<Mlp> shared = make<Mlp>(f64_init(rngs));
  EXPECT_TRUE(equal(functional_call(shared, {}, x), shared(x)));
}

TEST(FunctionalCall, GradientsFlowToTheSubstitutesOnly) {
  Rngs rngs(0);
  Mlp m(f64_init(rngs));
  Tensor x = random({5, 3}, 1), g = random({5, 2}, 5);
  Tensor W2 = random({2, 4}, 4).requires_grad_(true);
  sum(mul(functional_call(m, {{"fc2.weight", W2}}, x), g)).backward();
  // d sum(g * (h W2^T + b)) / dW2 = g^T h with h = tanh(fc1(x)) [5, 4].
  Tensor h = tanh(linear(x, m.fc1->weight.value().detach(), m.fc1->bias.value().detach()));
  EXPECT_TRUE(all_close(W2.grad(), matmul(transpose(g, 0, 1), h), 1e-13, 1e-13));
  EXPECT_FALSE(m.fc2->weight.grad().defined()) << "the replaced parameter gets no gradient";
  EXPECT_TRUE(m.fc1->weight.grad().defined()) << "the module's own parameters still get theirs";

  // Finite differences in f64 with respect to every substitute.
  m.zero_grad();
  EXPECT_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return functional_call(m, {{"fc1.weight", in[0]}, {"fc1.bias", in[1]}, {"fc2.weight", in[2]}}, in[3]);
      },
      {leaf({4, 3}, 11), leaf({4}, 12), leaf({2, 4}, 13), leaf({5, 3}, 14)});
}

TEST(FunctionalCall, SecondOrderThroughAnInnerStep) {
  // MAML's inner step: theta' = theta - lr * dL/dtheta (create_graph), the
  // outer loss at theta' through functional_call; its gradient reaches theta
  // through both terms. Checked by finite differences on theta.
  Rngs rngs(0);
  Linear lin(3, 2, f64_init(rngs));
  Tensor x = random({4, 3}, 1), y = random({4, 2}, 2);
  auto outer = [&](const std::vector<Tensor>& in) {
    const Tensor& w = in[0];
    auto inner = [&](const std::vector<Tensor>& ws) {
      return mse_loss(functional_call(lin, {{"weight", ws[0]}}, x), y);
    };
    Tensor gw = kiln::grad(inner, {w})[0];  // w requires grad: built with create_graph (nests)
    return mse_loss(functional_call(lin, {{"weight", sub(w, mul(gw, 0.1))}}, x), y);
  };
  EXPECT_GRADCHECK(outer, {leaf({2, 3}, 7)});
}

TEST(FunctionalCall, RestoresTheParametersWhenForwardThrows) {
  Thrower t;
  const Tensor own = t.weight.value();
  Tensor other = full({2}, 3.0f);
  EXPECT_THROW(functional_call(t, {{"weight", other}}, ones({2})), std::runtime_error);
  EXPECT_TRUE(t.weight.value().is_same(own));
  // A kiln::Error from a layer's own check (bad input) restores them too.
  Rngs rngs(0);
  Mlp m(f64_init(rngs));
  const Tensor w = m.fc1->weight.value();
  EXPECT_KILN_ERROR(functional_call(m, {{"fc1.weight", random({4, 3}, 1)}}, random({5, 7}, 2)), "[linear]");
  EXPECT_TRUE(m.fc1->weight.value().is_same(w));
}

TEST(FunctionalCall, BadSubstitutesAreErrorsAndChangeNothing) {
  Rngs rngs(0);
  Mlp m(f64_init(rngs));
  const Tensor w = m.fc1->weight.value();
  Tensor x = random({5, 3}, 1);
  // The first key is fine; the second is checked before anything is swapped.
  EXPECT_KILN_ERROR(functional_call(m, {{"fc1.weight", random({4, 3}, 2)}, {"fc3.weight", random({4, 3}, 3)}}, x),
                    "[functional_call] 'fc3.weight' is not a parameter of Mlp (buffers are not substituted)");
  EXPECT_TRUE(m.fc1->weight.value().is_same(w));
  EXPECT_KILN_ERROR(functional_call(m, {{"fc1.weight", random({3, 4}, 2)}}, x),
                    "[functional_call] 'fc1.weight' is [3, 4] f64 but the parameter is [4, 3] f64");
  EXPECT_KILN_ERROR(functional_call(m, {{"fc1.bias", zeros({4})}}, x),
                    "[functional_call] 'fc1.bias' is [4] f32 but the parameter is [4] f64");
  EXPECT_KILN_ERROR(functional_call(m, {{"fc2.bias", Tensor()}}, x), "[functional_call] 'fc2.bias' is an undefined tensor");
  EXPECT_TRUE(m.fc1->weight.value().is_same(w));
}

}  // namespace
}  // namespace kiln::nn
