// `kiln generate`: continue a prompt with a language model trained by
// `kiln train lm` (apps/kiln/lm.h), streaming each token's text as it is
// sampled (models::generate, KV cache).
//
//   app::GenerateTextOptions o{.checkpoint = "runs/lm", .prompt = "ROMEO:", .max_new_tokens = 200};
//   std::string text = app::generate_text(o);   // also written to std::cout token by token
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace kiln::app {

struct GenerateTextOptions {
  std::string checkpoint = "";   // a checkpoint of `kiln train lm`, or its run folder (the newest)
  std::string prompt = "\n";     // nanoGPT's sample.py starts from "\n"
  int64_t max_new_tokens = 500;
  double temperature = 0.8;      // nanoGPT's sample.py defaults: 0.8, top-k 200
  int64_t top_k = 200;           // 0: all tokens
  double top_p = 1.0;            // 1: no nucleus filter
  uint64_t seed = 0;
  int threads = 0;               // 0: kiln's default
  std::ostream* out = nullptr;   // where the prompt and the tokens go; nullptr: std::cout
};

/// Prints the prompt, then each new token's bytes as soon as it is sampled
/// (flushed), then a newline; returns the new text (prompt not included).
/// kiln::Error on a bad checkpoint, a prompt the tokenizer cannot encode (a
/// character the char vocabulary lacks) or bad sampling options.
std::string generate_text(const GenerateTextOptions& options);

}  // namespace kiln::app
