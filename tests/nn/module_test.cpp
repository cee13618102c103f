// Module semantics (SPECS §1, M1-M11) and the transforms over a module (A2).
#include "kiln/nn/module.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "kiln/nn/norm.h"
#include "tests/support/nn_testing.h"

namespace kiln::nn {
namespace {
using namespace testing;

std::vector<std::string> names_of(const auto& named) {
  std::vector<std::string> out;
  for (const auto& [n, v] : named) out.push_back(n);
  return out;
}

// A child returning a tuple, one returning a name -> tensor map (M1).
struct Split : Module {
  std::tuple<Tensor, Tensor> forward(const Tensor& x) const { return {relu(x), neg(x)}; }
};
struct Heads : Module {
  Shared<Linear> mean, scale;
  explicit Heads(const Init& init)
      : mean(register_module("mean", Linear(3, 2, init))), scale(register_module("scale", Linear(3, 2, init))) {}
  std::map<std::string, Tensor> forward(const Tensor& x) const { return {{"mean", mean(x)}, {"scale", scale(x)}}; }
};

struct Net : Module {
  Shared<Linear> fc1;
  Shared<Split> split;
  Shared<Heads> heads;
  Tensor steps;
  explicit Net(const Init& init)
      : fc1(register_module("fc1", Linear(4, 3, init))),
        split(register_module("split", Split())),
        heads(register_module("heads", Heads(init))) {
    steps = register_buffer("steps", zeros({1}, {.dtype = kI64}));
  }
  Tensor forward(const Tensor& x) const {
    auto [pos, negative] = split(fc1(x));
    auto out = heads(add(pos, negative));
    return add(out.at("mean"), out.at("scale"));
  }
};

TEST(Module, ChildrenReturnTensorsTuplesAndMaps) {
  Rngs rngs(0);
  auto net = make<Net>(rngs);
  Tensor x = randn({5, 4}, *std::make_unique<Generator>(1));
  Tensor y = net(x);
  EXPECT_EQ(y.shape(), (Shape{5, 2}));
  // Same value computed by hand from the registered weights.
  Tensor h = linear(x, net->fc1->weight, net->fc1->bias);
  Tensor z = add(relu(h), neg(h));
  Tensor expect = add(linear(z, net->heads->mean->weight, net->heads->mean->bias),
                      linear(z, net->heads->scale->weight, net->heads->scale->bias));
  EXPECT_TRUE(all_close(y, expect));
}

TEST(Module, CanonicalPathsParametersAndBuffers) {
  Rngs rngs(0);
  Net net(rngs);
  EXPECT_EQ(names_of(net.named_parameters()),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "heads.mean.weight", "heads.mean.bias",
                                      "heads.scale.weight", "heads.scale.bias"}));
  EXPECT_EQ(names_of(net.named_buffers()), (std::vector<std::string>{"steps"}));
  EXPECT_EQ(names_of(net.named_modules()),
            (std::vector<std::string>{"", "fc1", "split", "heads", "heads.mean", "heads.scale"}));
  EXPECT_EQ(names_of(net.named_children()), (std::vector<std::string>{"fc1", "split", "heads"}));
  EXPECT_EQ(names_of(net.named_parameters(/*recurse=*/false)), std::vector<std::string>{});
  // Buffers never count as parameters and never require grad (M2).
  EXPECT_EQ(net.num_parameters(), 4 * 3 + 3 + 2 * (3 * 2 + 2));
  EXPECT_FALSE(net.steps.requires_grad());
  for (const Parameter& p : net.parameters()) EXPECT_TRUE(p.requires_grad());
  // PyTorch's order: a module's own parameters, its own buffers, then its children.
  EXPECT_EQ(names_of(net.state_dict()),
            (std::vector<std::string>{"steps", "fc1.weight", "fc1.bias", "heads.mean.weight", "heads.mean.bias",
                                      "heads.scale.weight", "heads.scale.bias"}));
}

struct Tied : Module {
  Shared<Linear> a, b;
  Parameter shared_scale;
  explicit Tied(const Init& init) {
    a = register_module("a", Linear(2, 2, init));
    b = register_module("b", a);  // the same module in two places (M3)
    shared_scale = register_parameter("scale", ones({2}), /*decay=*/false);
    register_parameter("scale_again", shared_scale);
  }
};

TEST(Module, SharedModulesShareWeightsAndDeduplicate) {
  Rngs rngs(0);
  Tied m(rngs);
  EXPECT_EQ(m.a.get(), m.b.get());
  EXPECT_EQ(names_of(m.named_parameters()), (std::vector<std::string>{"scale", "a.weight", "a.bias"}));
  EXPECT_EQ(m.num_parameters(), 2 + 4 + 2);
  EXPECT_EQ(names_of(m.named_modules()), (std::vector<std::string>{"", "a"}));
  // The state dict has every path, as PyTorch's does for tied weights.
  EXPECT_EQ(names_of(m.state_dict()),
            (std::vector<std::string>{"scale", "scale_again", "a.weight", "a.bias", "b.weight", "b.bias"}));
  {
    NoGradGuard g;
    fill_(m.b->weight, 3.0);
  }
  EXPECT_EQ(m.a->weight.value().to_vector<float>(), std::vector<float>(4, 3.0f));
}

TEST(Module, ParametersAreLive) {
  Rngs rngs(0);
  Linear lin(3, 2, rngs);
  ParameterList params = lin.parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params.names(), (std::vector<std::string>{"weight", "bias"}));
  {
    NoGradGuard g;
    fill_(params[0], 1.0);
    fill_(params[1], 0.5);
  }
  Tensor y = lin.forward(ones({1, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3.5f, 3.5f}));
  EXPECT_TRUE(params[0].is_same(lin.weight));
}

TEST(Module, ContainersNameChildrenLikePyTorch) {
  Rngs rngs(0);
  Sequential seq(Linear(4, 8, rngs), ReLU(), Linear(8, 2, rngs));
  EXPECT_EQ(names_of(seq.named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  Tensor x = randn({3, 4}, *std::make_unique<Generator>(2));
  auto l0 = seq.at<Linear>(0), l2 = seq.at<Linear>(2);
  EXPECT_TRUE(all_close(seq.forward(x), l2(relu(l0(x)))));
  EXPECT_EQ(seq.size(), 3u);
  EXPECT_KILN_ERROR(seq.at<Linear>(1), "[Sequential.at] child '1' is a ReLU, not a Linear");
  EXPECT_KILN_ERROR(seq[3], "[Sequential] index 3 out of range for 3 modules");

  ModuleList list;
  list.push_back(Linear(2, 2, rngs));
  list.push_back(list.at<Linear>(0));  // shared
  list.push_back(Linear(2, 3, rngs, /*bias=*/false));
  EXPECT_EQ(names_of(list.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias", "2.weight"}));
  EXPECT_EQ(names_of(list.state_dict()),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "2.weight"}));

  ModuleDict dict;
  dict.insert("encoder", Linear(2, 2, rngs));
  dict.insert("act", Tanh());
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"encoder", "act"}));
  EXPECT_TRUE(dict.contains("act"));
  EXPECT_EQ(dict["act"].type_name(), "Tanh");
  EXPECT_KILN_ERROR(dict["decoder"], "[ModuleDict] no module named 'decoder' (keys: encoder, act)");
  EXPECT_KILN_ERROR(dict.insert("act", ReLU()), "already has a child, parameter or buffer named 'act'");
}

TEST(Module, StateDictIsAnIndependentSnapshot) {
  Rngs rngs(0);
  Linear lin(3, 2, rngs);
  StateDict sd = lin.state_dict();
  EXPECT_FALSE(sd.at("weight").requires_grad());
  EXPECT_FALSE(sd.at("weight").is_same_storage(lin.weight));
  Tensor before = sd.at("weight").clone();
  {
    NoGradGuard g;
    fill_(lin.weight, 7.0);
  }
  EXPECT_TRUE(equal(sd.at("weight"), before));
  fill_(sd.at("bias"), 9.0);
  EXPECT_EQ(lin.bias.value().to_vector<float>(), (std::vector<float>{0.0f, 0.0f}));
}

TEST(Module, LoadStateDictRoundTripsAndKeepsIdentity) {
  Rngs a_rngs(1), b_rngs(2);
  Net a(a_rngs), b(b_rngs);
  Tensor w = b.fc1->weight.value();  // an alias the user kept
  LoadResult r = b.load_state_dict(a.state_dict());
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
  for (const auto& [key, value] : a.state_dict()) EXPECT_TRUE(equal(b.state_dict().at(key), value)) << key;
  EXPECT_TRUE(w.is_same(b.fc1->weight));
  EXPECT_TRUE(b.fc1->weight.requires_grad());
  Tensor x = ones({2, 4});
  EXPECT_TRUE(equal(a.forward(x), b.forward(x)));
}

TEST(Module, StrictLoadChecksEverythingBeforeCopyingAnything) {
  Rngs rngs(0);
  Linear lin(3, 2, rngs);
  const StateDict original = lin.state_dict();

  StateDict missing{{"weight", zeros({2, 3})}};
  EXPECT_KILN_ERROR(lin.load_state_dict(missing), "[load_state_dict] Linear not loaded, nothing was changed: "
                                                  "missing keys: bias");
  StateDict extra{{"weight", zeros({2, 3})}, {"bias", zeros({2})}, {"gain", zeros({1})}};
  EXPECT_KILN_ERROR(lin.load_state_dict(extra), "unexpected keys: gain");
  StateDict bad_shape{{"weight", zeros({2, 3})}, {"bias", zeros({3})}};
  EXPECT_KILN_ERROR(lin.load_state_dict(bad_shape), "mismatched: 'bias' expects [2] f32 but the state has [3] f32");
  StateDict bad_dtype{{"weight", zeros({2, 3}, {.dtype = kF64})}, {"bias", zeros({2})}};
  EXPECT_KILN_ERROR(lin.load_state_dict(bad_dtype), "'weight' expects [2, 3] f32 but the state has [2, 3] f64");
  // Non-strict: reports, loads what matches, but a mismatch is still an error.
  EXPECT_KILN_ERROR(lin.load_state_dict(bad_shape, {.strict = false}), "mismatched: 'bias'");
  for (const auto& [key, value] : original) EXPECT_TRUE(equal(lin.state_dict().at(key), value)) << key;

  LoadResult r = lin.load_state_dict(extra, {.strict = false});
  EXPECT_EQ(r.unexpected_keys, std::vector<std::string>{"gain"});
  EXPECT_TRUE(equal(lin.weight.value().detach(), zeros({2, 3})));
  r = lin.load_state_dict(missing, {.strict = false});
  EXPECT_EQ(r.missing_keys, std::vector<std::string>{"bias"});
}

TEST(Module, StrictLoadAcceptsKnownOptionalKeys) {
  // A PyTorch BatchNorm state from before num_batches_tracked existed (0.4):
  // strict, with that key declared optional, loads the rest and keeps the
  // module's counter; every other missing key is still an error.
  BatchNorm1d bn(2);
  bn.forward(tensor<float>({1, 2, 3, 5, 4, 9}, {3, 2}));  // counter 1, stats moved
  StateDict old{{"weight", full({2}, 2.0f)},
                {"bias", full({2}, 0.5f)},
                {"running_mean", full({2}, 0.25f)},
                {"running_var", full({2}, 4.0f)}};
  const LoadOptions optional{.optional_keys = {"num_batches_tracked"}};
  LoadResult r = bn.load_state_dict(old, optional);
  EXPECT_EQ(r.missing_keys, std::vector<std::string>{"num_batches_tracked"});  // reported, not an error
  EXPECT_TRUE(equal(bn.running_var, full({2}, 4.0f)));
  EXPECT_TRUE(equal(bn.weight.value().detach(), full({2}, 2.0f)));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  EXPECT_KILN_ERROR(bn.load_state_dict(old), "missing keys: num_batches_tracked");
  old.erase("running_var");
  EXPECT_KILN_ERROR(bn.load_state_dict(old, optional),
                    "[load_state_dict] BatchNorm1d not loaded, nothing was changed: missing keys: running_var");
  EXPECT_TRUE(equal(bn.running_var, full({2}, 4.0f))) << "nothing copied";
  // Optional keys do not excuse unexpected ones or mismatches.
  StateDict extra{{"weight", zeros({2})}, {"bias", zeros({2})}, {"running_mean", zeros({2})},
                  {"running_var", ones({2})}, {"gain", zeros({1})}};
  EXPECT_KILN_ERROR(bn.load_state_dict(extra, {.optional_keys = {"gain", "num_batches_tracked"}}),
                    "unexpected keys: gain");
}

TEST(Module, TrainEvalRecurseReturnTheModuleAndLeaveGradModeAlone) {
  Rngs rngs(0);
  Net net(rngs);
  EXPECT_TRUE(net.is_training());
  Module& same = net.eval();
  EXPECT_EQ(&same, &net);
  for (const auto& [path, m] : net.named_modules()) EXPECT_FALSE(m->is_training()) << path;
  EXPECT_TRUE(GradMode::is_enabled());
  net.heads->train();
  EXPECT_TRUE(net.heads->mean->is_training());
  EXPECT_FALSE(net.fc1->is_training());
  net.train();
  for (const auto& [path, m] : net.named_modules()) EXPECT_TRUE(m->is_training()) << path;
}

TEST(Module, ApplyVisitsChildrenFirstOnce) {
  Rngs rngs(0);
  Tied m(rngs);
  std::vector<std::string> order;
  m.apply([&](Module& x) { order.push_back(x.type_name()); });
  EXPECT_EQ(order, (std::vector<std::string>{"Linear", "Tied"}));
}

TEST(Module, StructuralEditsAndCastsAfterTakingParametersAreDetected) {
  Rngs rngs(0);
  Net net(rngs);
  ParameterList params = net.parameters();
  params.check("SGD.step");  // unchanged: fine
  net.heads->register_parameter("extra", ones({1}));
  EXPECT_KILN_ERROR(params.check("SGD.step"), "[SGD.step] module 'heads' was edited");

  ParameterList again = net.parameters();
  net.to(kF64);
  EXPECT_KILN_ERROR(again.check("Adam.step"), "[Adam.step] module 'fc1' was edited");

  // A list not taken from a module still sees dtype and shape changes.
  net.to(kF32);
  ParameterList loose({net.fc1->weight});
  loose.check("x");
  net.to(kF64);
  EXPECT_KILN_ERROR(loose.check("SGD.step"), "[SGD.step] parameter '#0' is now [3, 4] f64 but was [3, 4] f32");
  Linear other(2, 2, rngs);
  ParameterList other_params = other.parameters();
  other.to(kBF16);
  EXPECT_KILN_ERROR(other_params.check("SGD.step"), "module '<root>' was edited");
}

// filter() builds optimizer groups: names and the edit watch travel with it.
TEST(Module, FilteredParameterListsKeepNamesAndWatch) {
  Rngs rngs(0);
  Net net(rngs);
  ParameterList heads = net.parameters().filter([](const std::string& n, const Parameter&) {
    return n.starts_with("heads.");
  });
  ParameterList biases = net.parameters().filter([](const std::string&, const Parameter& p) { return !p.decay(); });
  EXPECT_EQ(heads.names(), (std::vector<std::string>{"heads.mean.weight", "heads.mean.bias", "heads.scale.weight",
                                                     "heads.scale.bias"}));
  EXPECT_EQ(biases.names(), (std::vector<std::string>{"fc1.bias", "heads.mean.bias", "heads.scale.bias"}));
  EXPECT_TRUE(heads[0].is_same(net.heads->mean->weight));
  net.fc1->register_buffer("extra", ones({1}));
  EXPECT_KILN_ERROR(heads.check("SGD.step"), "module 'fc1' was edited");
}

TEST(Module, ToCastsInPlaceKeepingIdentity) {
  Rngs rngs(0);
  Net net(rngs);
  Tensor alias = net.fc1->weight.value();
  Tensor before = alias.to(kF64);
  net.to(kF64);
  EXPECT_EQ(alias.dtype(), kF64);
  EXPECT_TRUE(alias.requires_grad());
  EXPECT_TRUE(equal(alias.detach(), before));
  EXPECT_EQ(net.steps.dtype(), kI64);  // integer buffers stay
  EXPECT_EQ(net.forward(ones({1, 4}, {.dtype = kF64})).dtype(), kF64);
  EXPECT_KILN_ERROR(net.to(kI32), "[Module.to] can only cast to a floating dtype, got i32");
}

TEST(Module, ZeroGradAndFreezing) {
  Rngs rngs(0);
  Linear lin(3, 2, rngs);
  sum(lin.forward(ones({1, 3}))).backward();
  EXPECT_TRUE(lin.weight.grad().defined());
  lin.zero_grad();
  EXPECT_FALSE(lin.weight.grad().defined());
  lin.requires_grad_(false);
  EXPECT_FALSE(lin.forward(ones({1, 3})).requires_grad());
  lin.requires_grad_(true);
  EXPECT_TRUE(lin.forward(ones({1, 3})).requires_grad());
}

TEST(Module, RegistrationErrors) {
  Rngs rngs(0);
  Module m;
  EXPECT_KILN_ERROR(m.register_parameter("a.b", ones({1})), "[register_parameter] name 'a.b' contains '.'");
  EXPECT_KILN_ERROR(m.register_buffer("", ones({1})), "[register_buffer] name is empty");
  m.register_parameter("w", ones({1}));
  EXPECT_KILN_ERROR(m.register_buffer("w", ones({1})), "already has a child, parameter or buffer named 'w'");
  EXPECT_KILN_ERROR(m.register_parameter("i", ones({1}, {.dtype = kI64})), "[Parameter] value of shape [1] has dtype i64");
  EXPECT_KILN_ERROR(m.register_buffer("u", Tensor()), "[register_buffer] buffer 'u' is an undefined tensor");

  auto outer = make<Sequential>();
  auto inner = outer->push_back(Sequential());
  EXPECT_KILN_ERROR(inner->register_module("loop", outer), "would make Sequential its own descendant");
}

TEST(Module, InitIsThreadedDownAndDrawsFromTheParamsStream) {
  Rngs rngs(0);
  Init init(rngs);
  init.weight = init::constant(0.5);
  init.bias = init::constant(-1.0);
  init.dtype = kF64;
  Net net(init);
  for (const auto& [path, p] : net.named_parameters()) {
    EXPECT_EQ(p.dtype(), kF64) << path;
    const double expect = path.ends_with("bias") ? -1.0 : 0.5;
    for (double v : p.value().to_vector<double>()) EXPECT_EQ(v, expect) << path;
  }
  // Same seed, same weights; the stream advances once per parameter.
  Rngs r1(7), r2(7), r3(8);
  Linear a(16, 8, r1), b(16, 8, r2), c(16, 8, r3);
  EXPECT_TRUE(equal(a.weight.value().detach(), b.weight.value().detach()));
  EXPECT_FALSE(equal(a.weight.value().detach(), c.weight.value().detach()));
  EXPECT_EQ(r1.state().at("params").count, 2u);
  Rngs none({{"dropout", 1}});
  EXPECT_KILN_ERROR(Linear(2, 2, none), "no stream named 'params'");
}

TEST(Module, DefaultInitIsFanInUniformWithZeroBiasAndDecayFlags) {
  Rngs rngs(3);
  Linear lin(400, 300, rngs);
  const double bound = 1.0 / std::sqrt(400.0);
  std::vector<float> w = lin.weight.value().to_vector<float>();
  double sum_sq = 0, max_abs = 0;
  for (float v : w) {
    sum_sq += double(v) * v;
    max_abs = std::max(max_abs, double(std::abs(v)));
  }
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.99 * bound);
  EXPECT_NEAR(sum_sq / double(w.size()), bound * bound / 3, 0.02 * bound * bound);  // U(-b, b) variance
  EXPECT_EQ(lin.bias.value().to_vector<float>(), std::vector<float>(300, 0.0f));
  EXPECT_TRUE(lin.weight.decay());
  EXPECT_FALSE(lin.bias.decay());
}

TEST(Module, ReprIsAPyTorchStyleTree) {
  Rngs rngs(0);
  Sequential seq(Linear(4, 8, rngs), ReLU(), Linear(8, 2, rngs, false));
  EXPECT_EQ(seq.repr(),
            "Sequential(\n"
            "  (0): Linear(in_features=4, out_features=8, bias=true)\n"
            "  (1): ReLU()\n"
            "  (2): Linear(in_features=8, out_features=2, bias=false)\n"
            ")");
}

struct Transposed : Module {
  Parameter weight;
  Transposed() { weight = register_parameter("weight", zeros({2, 3})); }
  Tensor from_torch(const std::string& n, const Tensor& v) const override {
    return n == "weight" ? v.transpose(0, 1) : v;
  }
};

TEST(Module, TorchLayoutConvertsOnLoad) {
  Transposed m;
  Tensor torch_w = arange(0, 6, 1, {.dtype = kF32}).reshape({3, 2});
  EXPECT_KILN_ERROR(m.load_state_dict({{"weight", torch_w}}), "'weight' expects [2, 3] f32 but the state has [3, 2]");
  m.load_state_dict({{"weight", torch_w}}, {.torch_layout = true});
  EXPECT_TRUE(equal(m.weight.value().detach(), torch_w.transpose(0, 1).contiguous()));
}

// ---- transforms over a module (A2) ----

TEST(ModuleTransforms, ValueAndGradMatchesBackwardAndLeavesGradsAlone) {
  Rngs rngs(0);
  Net net(rngs);
  Tensor x = randn({5, 4}, *std::make_unique<Generator>(3));
  auto loss_fn = [&](Net& m) { return mean(square(m.forward(x))); };
  auto [loss, grads] = kiln::value_and_grad(net, loss_fn);
  EXPECT_FALSE(loss.requires_grad());
  for (const Parameter& p : net.parameters()) EXPECT_FALSE(p.grad().defined());

  loss_fn(net).backward();
  ASSERT_EQ(grads.size(), 6u);
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_TRUE(all_close(grads[i], grads.params()[i].grad())) << grads.names()[i];
    EXPECT_TRUE(grads.at(grads.params()[i]).is_same(grads[i]));
  }
  EXPECT_TRUE(grads.at("heads.mean.bias").is_same(grads[3]));
  EXPECT_KILN_ERROR(grads.at("nope"), "[Gradients] no gradient named 'nope'");
  EXPECT_TRUE(all_close(loss, loss_fn(net)));
}

TEST(ModuleTransforms, HasAuxFrozenAndUnusedParameters) {
  Rngs rngs(0);
  Net net(rngs);
  net.fc1->bias.requires_grad_(false);
  auto [loss_out, grads] = kiln::value_and_grad(
      net,
      [&](Net& m) {
        Tensor y = m.heads->mean(ones({2, 3}));
        return std::pair{sum(y), y};
      },
      has_aux);
  EXPECT_EQ(loss_out.second.shape(), (Shape{2, 2}));
  EXPECT_FALSE(grads.at("fc1.bias").defined());                               // frozen
  EXPECT_TRUE(equal(grads.at("fc1.weight"), zeros({3, 4})));                  // unused
  EXPECT_TRUE(equal(grads.at("heads.mean.bias"), full({2}, 2.0)));            // d sum / d bias
  auto [g2, aux] = kiln::grad(net, [&](Net& m) { return std::pair{sum(m.forward(ones({1, 4}))), 1}; }, has_aux);
  EXPECT_EQ(aux, 1);
  EXPECT_EQ(g2.size(), 6u);
}

TEST(ModuleTransforms, GradientsFromAnotherModelAreRejected) {
  Rngs rngs(0);
  Net a(rngs), b(rngs);
  Linear c(4, 3, rngs);
  Gradients ga = kiln::grad(a, [&](Net& m) { return sum(m.forward(ones({1, 4}))); });
  ga.check_matches(a.parameters(), "SGD.step");
  EXPECT_KILN_ERROR(ga.check_matches(b.parameters(), "SGD.step"),
                    "[SGD.step] the gradients are for another model: gradient 0 is for 'fc1.weight'");
  EXPECT_KILN_ERROR(ga.check_matches(c.parameters(), "SGD.step"),
                    "the gradients are for another model structure: 6 gradients for 2 parameters");
  EXPECT_KILN_ERROR(kiln::grad(a, [&](Net& m) { return m.forward(ones({1, 4})); }),
                    "[value_and_grad] the function must return a floating-point scalar loss, got shape [1, 2]");
  Module empty;
  EXPECT_KILN_ERROR(kiln::grad(empty, [](Module&) { return ones({}); }), "Module has no parameters");
}

}  // namespace
}  // namespace kiln::nn
