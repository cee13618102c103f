// Autoregressive sampling from a CausalLM with its KV cache: temperature,
// top-k and top-p (nucleus) filtering, seeded draws from a kiln Generator,
// tokens streamed to a callback as they are chosen. Letters: V vocab_size,
// Tp prompt tokens, N new tokens.
//
//   models::GenerateOptions o{.max_new_tokens = 200, .temperature = 0.8, .top_k = 40, .seed = 1};
//   std::vector<int64_t> ids = models::generate(lm, tok.encode("ROMEO:"), o,
//                                               [&](int64_t t) { std::cout << tok.decode({t}) << std::flush; });
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/models/causal_lm.h"

namespace kiln::models {

/// How the next token is drawn from one row of logits.
struct SamplingOptions {
  double temperature = 1.0;  // logits / temperature; 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // keep the k largest logits (and any tied with the k-th); 0: all
  double top_p = 1.0;        // then keep the most likely tokens until their mass reaches top_p; 1: all
};

struct GenerateOptions {
  int64_t max_new_tokens = 256;  // N at most
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;             // the Generator of the draws: a seed gives one sequence
  std::vector<int64_t> stop{};   // stop after emitting any of these ids (it is emitted)
};

/// The distribution sampled from: logits [V] (any floating dtype) -> f64
/// probabilities [V], zero outside the top-k / top-p set, summing to one. With
/// temperature 0, one-hot at the argmax. kiln::Error on bad options (temperature
/// < 0, top_k < 0, top_p outside (0, 1]) or logits that are not 1-D.
Tensor sampling_probs(const Tensor& logits, const SamplingOptions& options = {});

/// One token from sampling_probs(logits, options): the inverse CDF at one
/// uniform draw of gen (greedy draws nothing).
int64_t sample_token(const Tensor& logits, const SamplingOptions& options, Generator& gen);

/// Called with each new token as soon as it is chosen (streaming).
using TokenCallback = std::function<void(int64_t token)>;

/// Continues prompt (Tp >= 1 ids in [0, V)) by up to max_new_tokens tokens and
/// returns the N new ones (prompt not included). Batch 1, under NoGradGuard,
/// with the model's KV cache: the prompt is one prefill, then one token per
/// step. Within block_size the logits are the full forward pass's (tests); past
/// it the context slides: the cache is refilled with the last block_size / 2
/// tokens (at least one) and decoding continues. The model must be in eval
/// mode or have dropout 0.
std::vector<int64_t> generate(const CausalLM& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options = {}, const TokenCallback& on_token = {});

}  // namespace kiln::models
