// models::generate and its sampling: greedy decoding against argmax of full
// forward reruns, the temperature / top-k / top-p distribution against one
// computed here, seeded reproducibility, streaming, stop tokens, error paths.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "kiln/core/grad_mode.h"
#include "kiln/models/generate.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/random.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {

CausalLMConfig small(bool llama) {
  CausalLMConfig c{.vocab_size = 13, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 16};
  if (llama) {
    c.norm = nn::TransformerNorm::rms_norm;
    c.learned_positions = false;
    c.rotary = true;
    c.mlp = nn::TransformerActivation::swiglu;
    c.tie_weights = false;
  }
  return c;
}

// Greedy decoding is the argmax of a full forward pass over the whole sequence so far, at every step.
TEST(Generate, GreedyEqualsArgmaxOfFullForward) {
  for (bool llama : {false, true}) {
    SCOPED_TRACE(llama);
    Rngs rngs(1);
    CausalLM lm(small(llama), rngs);
    {
      NoGradGuard ng;  // sharpen the weights so the argmax is far from ties
      for (auto& p : lm.parameters())
        if (p.value().dim() == 2) mul_(p.value(), 10.0);
    }
    const std::vector<int64_t> prompt{3, 1, 4};
    std::vector<int64_t> streamed;
    std::vector<int64_t> got =
        generate(lm, prompt, {.max_new_tokens = 13, .temperature = 0}, [&](int64_t t) { streamed.push_back(t); });
    ASSERT_EQ(got.size(), 13u);  // 3 + 13 = block_size
    EXPECT_EQ(streamed, got);
    std::vector<int64_t> seq = prompt;
    NoGradGuard ng;
    for (int64_t expected : got) {
      Tensor logits = lm.forward(tensor(seq, Shape{1, int64_t(seq.size())}));  // [1, T, V]
      const int64_t best = argmax(select(select(logits, 0, 0), 0, int64_t(seq.size()) - 1)).item<int64_t>();
      EXPECT_EQ(expected, best) << "at " << seq.size();
      seq.push_back(best);
    }
  }
}

// Past block_size (16) the context slides: when it would exceed 16 tokens it
// restarts from the last 8, positions from 0. Greedy decoding then equals the
// argmax of a full forward pass over that window.
TEST(Generate, SlidingWindowPastBlockSize) {
  Rngs rngs(4);
  CausalLM lm(small(false), rngs);
  {
    NoGradGuard ng;
    for (auto& p : lm.parameters())
      if (p.value().dim() == 2) mul_(p.value(), 10.0);
  }
  const std::vector<int64_t> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 1, 2, 3, 4, 5};  // 18 > 16
  std::vector<int64_t> got = generate(lm, prompt, {.max_new_tokens = 30, .temperature = 0});
  ASSERT_EQ(got.size(), 30u);
  std::vector<int64_t> seq = prompt;
  size_t start = seq.size() - 16;
  NoGradGuard ng;
  for (int64_t expected : got) {
    std::vector<int64_t> window(seq.begin() + std::ptrdiff_t(start), seq.end());
    Tensor logits = lm.forward(tensor(window, Shape{1, int64_t(window.size())}));
    const int64_t best = argmax(select(select(logits, 0, 0), 0, int64_t(window.size()) - 1)).item<int64_t>();
    ASSERT_EQ(expected, best) << "at " << seq.size();
    seq.push_back(best);
    if (seq.size() - start > 16) start = seq.size() - 8;
  }
}

// softmax(x / temperature) after dropping everything below the k-th largest,
// then the most likely until the mass reaches top_p; written out here.
std::vector<double> reference(std::vector<double> x, double temperature, int64_t k, double top_p) {
  const size_t V = x.size();
  std::vector<double> sorted = x;
  std::sort(sorted.rbegin(), sorted.rend());
  std::vector<bool> in(V, true);
  if (k > 0 && size_t(k) < V)
    for (size_t i = 0; i < V; ++i) in[i] = x[i] >= sorted[size_t(k - 1)];
  double m = -1e300, s = 0;
  for (size_t i = 0; i < V; ++i)
    if (in[i]) m = std::max(m, x[i]);
  std::vector<double> p(V, 0.0);
  for (size_t i = 0; i < V; ++i)
    if (in[i]) s += p[i] = std::exp((x[i] - m) / temperature);
  for (double& v : p) v /= s;
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  double mass = 0;
  std::vector<double> q(V, 0.0);
  for (size_t r = 0; r < V && mass < top_p; ++r) mass += q[order[r]] = p[order[r]];
  for (double& v : q) v /= mass;
  return q;
}

TEST(Generate, SamplingDistribution) {
  const std::vector<float> row{1.5f, -0.5f, 3.0f, 0.25f, 2.0f, -2.0f, 2.0f, 0.0f};
  Tensor logits = tensor(row);
  std::vector<double> x(row.begin(), row.end());
  struct Case {
    double temperature;
    int64_t k;
    double p;
  };
  for (const Case& c : {Case{1.0, 0, 1.0}, Case{0.5, 0, 1.0}, Case{1.0, 3, 1.0}, Case{1.0, 2, 1.0},
                        Case{2.0, 0, 0.6}, Case{1.0, 0, 0.9}, Case{0.7, 5, 0.8}, Case{1.0, 0, 1e-9}, Case{1.0, 100, 1.0}}) {
    SCOPED_TRACE(::testing::Message() << "t " << c.temperature << " k " << c.k << " p " << c.p);
    Tensor probs = sampling_probs(logits, {.temperature = c.temperature, .top_k = c.k, .top_p = c.p});
    EXPECT_EQ(probs.shape(), (Shape{8}));
    EXPECT_EQ(probs.dtype(), kF64);
    EXPECT_TRUE(testing::all_close(probs, tensor(reference(x, c.temperature, c.k, c.p)), 1e-12, 1e-15));
  }
  // top_k 2 keeps 3.0 and both 2.0s (ties with the k-th are kept, as nanoGPT's v[:, [-1]] rule).
  Tensor k2 = sampling_probs(logits, {.top_k = 2});
  EXPECT_GT(k2.select(0, 4).item<double>(), 0.0);
  EXPECT_GT(k2.select(0, 6).item<double>(), 0.0);
  EXPECT_EQ(k2.select(0, 0).item<double>(), 0.0);
  // A tiny top_p keeps only the most likely token; temperature 0 is one-hot at the argmax.
  EXPECT_EQ(sampling_probs(logits, {.top_p = 1e-9}).select(0, 2).item<double>(), 1.0);
  EXPECT_EQ(sampling_probs(logits, {.temperature = 0}).select(0, 2).item<double>(), 1.0);
  Generator gen(0);
  EXPECT_EQ(sample_token(logits, {.temperature = 0}, gen), 2);
  EXPECT_EQ(gen.offset(), 0u);  // greedy draws nothing
}

// Draws follow the distribution: 20000 draws of top-k 3 land on its three
// tokens with their probabilities (binomial std < 0.0036).
TEST(Generate, DrawsFollowTheDistribution) {
  Tensor logits = tensor(std::vector<float>{0.5f, 1.0f, -1.0f, 0.0f, 2.0f});
  const SamplingOptions o{.temperature = 0.8, .top_k = 3};
  Tensor probs = sampling_probs(logits, o);
  Generator gen(42);
  std::vector<int> counts(5, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[size_t(sample_token(logits, o, gen))];
  for (int64_t i = 0; i < 5; ++i) EXPECT_NEAR(counts[size_t(i)] / double(n), probs.select(0, i).item<double>(), 0.015);
  EXPECT_EQ(counts[2], 0);
  EXPECT_EQ(counts[3], 0);
}

TEST(Generate, SeededAndReproducible) {
  Rngs rngs(2);
  CausalLM lm(small(true), rngs);
  const std::vector<int64_t> prompt{5};
  const GenerateOptions o{.max_new_tokens = 40, .temperature = 1.0, .top_k = 8, .top_p = 0.95, .seed = 7};
  std::vector<int64_t> a = generate(lm, prompt, o), b = generate(lm, prompt, o);
  EXPECT_EQ(a.size(), 40u);  // 1 + 40 > block_size 16: the window slides
  EXPECT_EQ(a, b);
  GenerateOptions other = o;
  other.seed = 8;
  EXPECT_NE(generate(lm, prompt, other), a);
  for (int64_t t : a) EXPECT_TRUE(t >= 0 && t < 13);
}

TEST(Generate, StopsAtStopToken) {
  Rngs rngs(3);
  CausalLM lm(small(false), rngs);
  std::vector<int64_t> free_run = generate(lm, {1, 2}, {.max_new_tokens = 12, .seed = 3});
  ASSERT_EQ(free_run.size(), 12u);
  const int64_t stop = free_run[4];
  const size_t first = size_t(std::find(free_run.begin(), free_run.end(), stop) - free_run.begin());
  std::vector<int64_t> stopped = generate(lm, {1, 2}, {.max_new_tokens = 12, .seed = 3, .stop = {stop}});
  EXPECT_EQ(stopped, std::vector<int64_t>(free_run.begin(), free_run.begin() + std::ptrdiff_t(first) + 1));
  EXPECT_TRUE(generate(lm, {1}, {.max_new_tokens = 0}).empty());
}

TEST(Generate, Errors) {
  Rngs rngs(0);
  CausalLM lm(small(false), rngs);
  EXPECT_KILN_ERROR(generate(lm, {}), "[generate] the prompt is empty");
  EXPECT_KILN_ERROR(generate(lm, {1}, {.temperature = -1}), "[generate] temperature must be finite and >= 0");
  EXPECT_KILN_ERROR(generate(lm, {1}, {.temperature = NAN}), "[generate] temperature must be finite and >= 0");
  EXPECT_KILN_ERROR(generate(lm, {1}, {.top_p = 0}), "[generate] top_p must be in (0, 1] (1: off), got 0");
  EXPECT_KILN_ERROR(generate(lm, {1}, {.top_p = 1.5}), "[generate] top_p must be in (0, 1]");
  EXPECT_KILN_ERROR(generate(lm, {1}, {.top_k = -2}), "[generate] top_k must be >= 0");
  EXPECT_KILN_ERROR(generate(lm, {1}, {.max_new_tokens = -1}), "[generate] max_new_tokens must be >= 0");
  EXPECT_KILN_ERROR(generate(lm, {1, 13}), "[generate] prompt token 13 at 1 is outside [0, vocab_size 13)");
  EXPECT_KILN_ERROR(sampling_probs(zeros({2, 3})), "[sampling_probs] logits [2, 3] f32 must be a non-empty 1-D");
  EXPECT_KILN_ERROR(sampling_probs(zeros({3}, {.dtype = kI64})), "must be a non-empty 1-D floating row");
  CausalLM dropping({.vocab_size = 13, .block_size = 16, .n_layer = 1, .n_head = 2, .n_embd = 16, .dropout = 0.1},
                    rngs);
  EXPECT_KILN_ERROR(generate(dropping, {1}), "[CausalLM] forward_cached needs dropout off: call eval()");
  dropping.eval();
  EXPECT_EQ(generate(dropping, {1}, {.max_new_tokens = 3}).size(), 3u);
}

}  // namespace
}  // namespace kiln::models
