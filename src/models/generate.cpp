// generate: a prefill and one cached step per token; sampling_probs: the
// temperature / top-k / top-p filter over one row of logits, in f64.
#include "kiln/models/generate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/shape.h"

namespace kiln::models {

namespace {

constexpr const char* kGenerate = "generate";
constexpr const char* kSample = "sampling_probs";

void check_sampling(const char* op, const SamplingOptions& o) {
  KILN_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, op,
             "temperature must be finite and >= 0 (0: greedy), got {}", o.temperature);
  KILN_CHECK(o.top_k >= 0, op, "top_k must be >= 0 (0: off), got {}", o.top_k);
  KILN_CHECK(o.top_p > 0 && o.top_p <= 1, op, "top_p must be in (0, 1] (1: off), got {}", o.top_p);
}

// logits [V] as f64 values.
std::vector<double> row_values(const Tensor& logits) {
  KILN_CHECK(logits.defined() && logits.dim() == 1 && logits.numel() > 0 && is_floating(logits.dtype()), kSample,
             "logits {} must be a non-empty 1-D floating row [V]",
             logits.defined() ? to_string(logits.shape()) + " " + std::string(name(logits.dtype())) : "undefined");
  std::vector<double> x(size_t(logits.numel()));
  copy_to_buffer(to(logits, kF64), x.data());
  return x;
}

std::vector<double> probs_of(std::vector<double> x, const SamplingOptions& o) {
  const size_t V = x.size();
  std::vector<double> p(V, 0.0);
  if (o.temperature == 0) {  // greedy: the first maximum
    p[size_t(std::max_element(x.begin(), x.end()) - x.begin())] = 1;
    return p;
  }
  constexpr double kOut = -std::numeric_limits<double>::infinity();
  if (o.top_k > 0 && size_t(o.top_k) < V) {  // below the k-th largest value: out (nanoGPT's rule, ties kept)
    std::vector<double> sorted = x;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[size_t(o.top_k - 1)];
    for (double& v : x)
      if (v < kth) v = kOut;
  }
  // Softmax of x / temperature over the survivors.
  const double top = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (size_t i = 0; i < V; ++i) sum += p[i] = x[i] == kOut ? 0.0 : std::exp((x[i] - top) / o.temperature);
  for (double& v : p) v /= sum;
  if (o.top_p < 1) {
    // Nucleus: the most likely tokens, in order, until their mass reaches top_p (the
    // one that crosses it included; so at least one survives).
    std::vector<size_t> order(V);
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
    double mass = 0, kept = 0;
    size_t n = 0;
    while (n < V && mass < o.top_p) mass += p[order[n++]];
    for (size_t i = n; i < V; ++i) p[order[i]] = 0;
    for (size_t i = 0; i < n; ++i) kept += p[order[i]];
    for (double& v : p) v /= kept;
  }
  return p;
}

int64_t draw(const std::vector<double>& p, Generator& gen) {
  const double u = double(gen.next_u64() >> 11) * 0x1.0p-53;  // uniform [0, 1)
  double cdf = 0;
  int64_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    last = int64_t(i);
    cdf += p[i];
    if (u < cdf) return last;
  }
  return last;  // u beyond the rounded total: the last token with mass
}

// The last row of logits [1, T, V] as [V].
Tensor last_row(const Tensor& logits) { return select(select(logits, 0, 0), 0, logits.size(1) - 1); }

Tensor ids_tensor(const std::vector<int64_t>& ids, size_t from) {
  std::vector<int64_t> v(ids.begin() + std::ptrdiff_t(from), ids.end());
  return tensor(v, Shape{1, int64_t(v.size())});
}

}  // namespace

Tensor sampling_probs(const Tensor& logits, const SamplingOptions& options) {
  check_sampling(kSample, options);
  std::vector<double> p = probs_of(row_values(logits), options);
  return tensor(p);
}

int64_t sample_token(const Tensor& logits, const SamplingOptions& options, Generator& gen) {
  check_sampling("sample_token", options);
  std::vector<double> p = probs_of(row_values(logits), options);
  if (options.temperature == 0) return int64_t(std::max_element(p.begin(), p.end()) - p.begin());
  return draw(p, gen);
}

std::vector<int64_t> generate(const CausalLM& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options, const TokenCallback& on_token) {
  const SamplingOptions so{.temperature = options.temperature, .top_k = options.top_k, .top_p = options.top_p};
  check_sampling(kGenerate, so);
  KILN_CHECK(!prompt.empty(), kGenerate, "the prompt is empty: give at least one token id");
  KILN_CHECK(options.max_new_tokens >= 0, kGenerate, "max_new_tokens must be >= 0, got {}", options.max_new_tokens);
  const int64_t V = model.config.vocab_size, block = model.config.block_size;
  for (size_t i = 0; i < prompt.size(); ++i)
    KILN_CHECK(prompt[i] >= 0 && prompt[i] < V, kGenerate, "prompt token {} at {} is outside [0, vocab_size {})",
               prompt[i], i, V);
  std::vector<int64_t> out;
  if (options.max_new_tokens == 0) return out;
  NoGradGuard no_grad;
  Generator gen(options.seed);
  std::vector<int64_t> seq = prompt;
  CausalLMCache cache = model.make_cache(1);
  // Prefill: the last block_size prompt tokens at positions 0...
  const size_t keep = size_t(std::max<int64_t>(1, block / 2));
  Tensor logits = last_row(model.forward_cached(ids_tensor(seq, seq.size() - std::min(seq.size(), size_t(block))), cache));
  for (int64_t n = 0; n < options.max_new_tokens; ++n) {
    const int64_t token = sample_token(logits, so, gen);
    seq.push_back(token);
    out.push_back(token);
    if (on_token) on_token(token);
    if (n + 1 == options.max_new_tokens ||
        std::find(options.stop.begin(), options.stop.end(), token) != options.stop.end())
      break;
    if (cache.length() == block) {  // full: slide the window (re-encode the last `keep` tokens from position 0)
      cache.clear();
      logits = last_row(model.forward_cached(ids_tensor(seq, seq.size() - keep), cache));
    } else {
      logits = last_row(model.forward_cached(tensor(std::vector<int64_t>{token}, Shape{1, 1}), cache));
    }
  }
  return out;
}

}  // namespace kiln::models
