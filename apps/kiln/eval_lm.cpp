// `kiln eval lm` (eval_lm.h).
#include "apps/kiln/eval_lm.h"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/kiln/lm.h"
#include "apps/kiln/model_files.h"
#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/core/rngs.h"
#include "kiln/nn/quantized.h"

namespace kiln::app {

namespace {
constexpr const char* kOp = "kiln eval lm";

int64_t count_quantized(nn::Module& m) {
  int64_t n = 0;
  for (auto& [name, mod] : m.named_modules()) {
    if (auto* l = dynamic_cast<nn::Linear*>(mod)) n += l->quantized != nullptr;
    if (auto* a = dynamic_cast<nn::MultiheadAttention*>(mod)) n += a->in_proj_quantized != nullptr;
    if (auto* q = dynamic_cast<nn::QuantizableWeight*>(mod)) n += q->quantized_weight() != nullptr;
  }
  return n;
}
}  // namespace

EvalLmResult eval_lm(const EvalLmOptions& o) {
  KILN_CHECK(!o.checkpoint.empty(), kOp, "--checkpoint PATH is required");
  KILN_CHECK(!o.data.empty(), kOp, "--data FILE (the text the model was trained on) is required");
  KILN_CHECK(o.batches > 0 && o.batch_size > 0, kOp, "--batches {} and --batch-size {} must be positive", o.batches,
             o.batch_size);
  KILN_CHECK(o.threads >= 0, kOp, "--threads must be non-negative, got {}", o.threads);
  if (o.threads > 0) set_num_threads(o.threads);
  std::ostream& out = o.out ? *o.out : std::cout;
  const auto start = std::chrono::steady_clock::now();

  const bool gguf = is_gguf_file(o.checkpoint);
  LanguageModel lm = gguf ? load_lm_gguf(o.checkpoint) : load_lm(o.checkpoint);
  KILN_CHECK(lm.model, kOp, "{}: a mamba3 model; eval lm measures GPT models", o.checkpoint);
  EvalLmResult r;
  r.quantized_matrices = count_quantized(*lm.model);
  if (r.quantized_matrices > 0) {
    for (auto& [name, mod] : lm.model->named_modules())
      if (auto* l = dynamic_cast<nn::Linear*>(mod); l && l->quantized) r.weights = nn::quant_type_name(l->quantized->type);
  }

  std::ifstream in(o.data, std::ios::binary);
  KILN_CHECK(in, kOp, "--data {}: cannot read it", o.data);
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<int64_t> ids;
  try {
    ids = lm.tokenizer->encode(ss.str());
  } catch (const Error& e) {
    KILN_FAIL(kOp, "--data {}: {}", o.data, e.what());
  }
  // train_lm's split and val estimate (apps/kiln/lm.cpp): val = the last 10%;
  // window i starts at (a 64-bit draw of block i of the val-estimate stream)
  // modulo (N - T); that stream is the third "data" draw of --seed.
  const int64_t T = lm.config.block_size;
  const int64_t n = int64_t(ids.size()), n_train = int64_t(double(n) * 0.9), n_val = n - n_train;
  KILN_CHECK(n_val >= T + 1, kOp, "--data {} has {} tokens: its val split ({}) needs more than the context {}",
             o.data, n, n_val, T);
  Rngs data_rngs{{"data", o.seed}};
  data_rngs.next("data");
  data_rngs.next("data");
  const Generator windows(data_rngs.next("data").next_u64());
  const int64_t starts = n_val - T;

  NoGradGuard no_grad;
  double sum = 0;
  for (int64_t b = 0; b < o.batches; ++b) {
    Tensor idx = Tensor::empty({o.batch_size, T}, kI64), tgt = Tensor::empty({o.batch_size, T}, kI64);
    for (int64_t k = 0; k < o.batch_size; ++k) {
      std::array<uint32_t, 4> blk = windows.block(uint64_t(b * o.batch_size + k));
      const int64_t s = n_train + int64_t((uint64_t(blk[0]) | (uint64_t(blk[1]) << 32)) % uint64_t(starts));
      for (int64_t t = 0; t < T; ++t) {
        idx.data<int64_t>()[k * T + t] = ids[size_t(s + t)];
        tgt.data<int64_t>()[k * T + t] = ids[size_t(s + t + 1)];
      }
    }
    sum += double(lm.model->loss(idx, tgt).item<float>());
  }
  r.val_loss = sum / double(o.batches);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out << fmt::format("{}: val loss {:.4f} ({} weights, {} quantized matrices; {} batches of {} x {} tokens, seed {}) "
                     "in {:.1f} s\n",
                     o.checkpoint, r.val_loss, r.weights, r.quantized_matrices, o.batches, o.batch_size, T, o.seed,
                     r.seconds);
  return r;
}

}  // namespace kiln::app
