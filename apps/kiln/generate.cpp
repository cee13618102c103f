#include "apps/kiln/generate.h"

#include <cmath>
#include <iostream>

#include "apps/kiln/lm.h"
#include "apps/kiln/model_files.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "kiln/models/generate.h"

namespace kiln::app {

namespace {
constexpr const char* kOp = "kiln generate";
}  // namespace

std::string generate_text(const GenerateTextOptions& o) {
  KILN_CHECK(!o.checkpoint.empty(), kOp, "--checkpoint PATH is required");
  KILN_CHECK(!o.prompt.empty(), kOp, "--prompt must not be empty (the model needs a first token)");
  // Every option is checked before anything is printed: a bad one must not
  // leave the prompt on the terminal (models::generate checks them too, late).
  KILN_CHECK(o.max_new_tokens >= 0, kOp, "--max-new-tokens must be non-negative, got {}", o.max_new_tokens);
  KILN_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, kOp,
             "--temperature must be a finite number in [0, inf), got {}", o.temperature);
  KILN_CHECK(o.top_k >= 0, kOp, "--top-k must be non-negative, got {}", o.top_k);
  KILN_CHECK(o.top_p > 0 && o.top_p <= 1, kOp, "--top-p must be in (0, 1], got {}", o.top_p);
  KILN_CHECK(o.threads >= 0, kOp, "--threads must be non-negative, got {}", o.threads);
  if (o.threads > 0) set_num_threads(o.threads);
  std::ostream& out = o.out ? *o.out : std::cout;

  // A GGUF model file of `kiln convert` (maybe quantized), or a checkpoint of `kiln train lm`.
  LanguageModel lm = is_gguf_file(o.checkpoint) ? load_lm_gguf(o.checkpoint) : load_lm(o.checkpoint);
  std::vector<int64_t> prompt;
  try {
    prompt = lm.tokenizer->encode(o.prompt);
  } catch (const Error& e) {
    KILN_FAIL(kOp, "--prompt: {}", e.what());
  }
  std::string text;
  out << o.prompt << std::flush;
  // A token's bytes as they come: a BPE token may end inside a UTF-8
  // character, which the terminal completes with the next one.
  const models::GenerateOptions go{.max_new_tokens = o.max_new_tokens,
                                   .temperature = o.temperature,
                                   .top_k = o.top_k,
                                   .top_p = o.top_p,
                                   .seed = o.seed};
  auto emit = [&](int64_t token) {
    std::string_view bytes = lm.tokenizer->token(token);
    text += bytes;
    out << bytes << std::flush;
  };
  // A mamba3 checkpoint decodes through its recurrent state (models::MambaLM's step).
  if (lm.mamba) models::generate(*lm.mamba, prompt, go, emit);
  else models::generate(*lm.model, prompt, go, emit);
  out << '\n' << std::flush;
  return text;
}

}  // namespace kiln::app
