// `kiln eval lm`: the validation loss of a language model of `kiln train lm`
// (a checkpoint or run folder) or of a GGUF file of `kiln convert` (f32, Q8_0
// or Q4_0), measured exactly as train_lm measures its final "val loss": the
// same 90/10 split of the same text, the same `batches` x `batch_size`
// windows of the val split drawn from the training's --seed. So the loss of
// the f32 checkpoint equals the one training printed, and a quantized file's
// rise over it is the quantization's cost (docs/model_files.md).
//
//   app::EvalLmResult r = app::eval_lm({.checkpoint = "q4.gguf", .data = "tinyshakespeare.txt"});
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace kiln::app {

struct EvalLmOptions {
  std::string checkpoint = "";  // a checkpoint of `kiln train lm`, its run folder, or a GGUF model of `kiln convert`
  std::string data = "";        // the text the model was trained on
  // The training's estimate (LmOptions' eval_iters, batch_size, seed).
  int64_t batches = 200;
  int64_t batch_size = 12;
  uint64_t seed = 0;
  int threads = 0;              // 0: kiln's default
  std::ostream* out = nullptr;  // one summary line; nullptr: std::cout
};

struct EvalLmResult {
  double val_loss = 0;             // mean next-token cross-entropy (nats) over batches x batch_size x T positions
  std::string weights = "f32";     // "f32", "q8_0" or "q4_0" (a GGUF file's kiln.quantization)
  int64_t quantized_matrices = 0;  // matrices the model multiplies by quantized codes
  double seconds = 0;
};

/// kiln::Error "[kiln eval lm] ..." on bad options, a file that is not a GPT
/// of `kiln train lm` / `kiln convert`, or text the tokenizer cannot encode.
EvalLmResult eval_lm(const EvalLmOptions& options);

}  // namespace kiln::app
