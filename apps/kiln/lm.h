// The language-model job: train nanoGPT's model (models::GPT) on a text file
// with nanoGPT's shakespeare_char recipe (config/train_shakespeare_char.py
// with its README's CPU overrides), validate on a held-out tail of the file,
// log every step to CSV, keep resumable checkpoints, print the final
// validation loss and the wall time. `kiln train lm` is a thin command line
// over this; load_lm() reads a checkpoint back for `kiln generate`.
//
//   app::LmOptions o{.data = "../shared/data/tinyshakespeare.txt"};
//   app::LmResult r = app::train_lm(o);          // r.val_loss ~ 1.88 after 2000 iterations
//   app::LanguageModel lm = app::load_lm(r.checkpoint);
//   lm.tokenizer->decode(...);                   // lm.model->forward(idx) [B, T] -> [B, T, V]
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/tokenizer.h"
#include "kiln/models/gpt.h"
#include "kiln/models/mamba_lm.h"

namespace kiln::app {

struct LmOptions {
  std::string data = "";           // the text file (required)
  std::string tokenizer = "char";  // "char", "byte" or "bpe", trained on the whole file
  int64_t vocab_size = 4096;       // bpe only: 256 bytes + merges
  // The model (models::GPTConfig; the vocabulary comes from the tokenizer).
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t block_size = 64;  // context T
  double dropout = 0.0;
  // "gpt" (the above) or "mamba3": models::MambaLM with n_layer blocks of
  // width n_embd (n_head and dropout unused), d_state and headdim below
  // (docs/ssm.md); the same data, batches, schedule and checkpoints.
  std::string arch = "gpt";
  int64_t d_state = 64;
  int64_t headdim = 32;
  // Mixture of experts (docs/moe.md): moe_experts > 0 replaces every block's
  // MLP by an nn::MoE; its telemetry goes to metrics.csv.
  int64_t moe_experts = 0;
  int64_t moe_top_k = 2;
  int64_t moe_expert_width = 0;      // 0: 4 C / top_k (the dense model's active FLOPs)
  std::string moe_balance = "none";  // none | aux | bias
  double moe_aux_coef = 0.01;
  double moe_z_coef = 0.0;
  double moe_bias_rate = 1e-3;
  // Optimisation: AdamW, linear warmup from 0 to lr over `warmup` iterations,
  // then cosine down to min_lr at `iters`; weight decay on the 2-D tensors only.
  int64_t iters = 2000;
  int64_t batch_size = 12;
  // "": batch_size; else the global batch fit_to_memory picks so that each
  // process' peak fits ("256M", "1G", "auto"; apps/kiln/memory_flag.h).
  std::string memory_budget = "";
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double grad_clip = 1.0;  // max global gradient norm; 0: no clipping
  // Loss estimates of train and val: eval_iters batches each, every
  // eval_interval iterations and at the end.
  int64_t eval_interval = 250;
  int64_t eval_iters = 200;
  uint64_t seed = 0;  // parameters, dropout and the batches
  int threads = 0;    // 0: kiln's default (all cores)
  std::string out = "runs/lm";  // metrics.csv and checkpoints/ go here
  std::string resume = "";      // "": a new run; "latest": the newest checkpoint in out; else a path
  bool overwrite = false;       // a new run may replace the run in out (moved aside until its first checkpoint)
  std::vector<std::string> overrides = {};  // hyper-parameters a resume may change ("lr", ...; "all": any)
  std::string on_nan = "stop";  // a NaN or infinite loss: "stop" the run (no checkpoint of it) or "skip" the step
  std::ostream* log = nullptr;  // where output goes; nullptr: std::cout
  std::optional<bool> tty = {}; // progress bar in place; default: whether stdout is a terminal
  bool compile = false;         // record the training step once and replay it (docs/compile.md); same results
};

struct LmResult {
  int64_t batch_size = 0;     // the global batch trained with (--batch-size, or --memory-budget's choice)
  double val_loss = 0;        // the last estimate (eval_iters batches of the val split)
  double train_loss = 0;      // the same on the train split
  int64_t iters = 0;          // optimizer steps done in all (resumed runs count the earlier ones)
  double train_seconds = 0;   // this process's training time, evaluations excluded
  double wall_seconds = 0;    // this process's whole run: tokenizer, evaluations, checkpoints
  int64_t parameters = 0;
  std::string checkpoint;     // the newest checkpoint
  std::string csv;            // the per-step log
  int signal = 0;             // the SIGINT or SIGTERM that stopped the run early; 0: none
};

/// Runs the job; kiln::Error on bad options (a model or batch beyond
/// check_lm_size's bounds), a missing or too short file, a folder holding
/// another run (without resume or overwrite), a checkpoint of another setup,
/// or a non-finite loss (on_nan "stop"). SIGINT and SIGTERM end it after the
/// current step with a checkpoint (result.signal says which).
LmResult train_lm(const LmOptions& options);

/// A trained model and its tokenizer, rebuilt from a checkpoint of train_lm.
struct LanguageModel {
  models::GPTConfig config;
  std::shared_ptr<models::GPT> model;  // in eval mode; null for a mamba3 checkpoint
  std::shared_ptr<models::MambaLM> mamba;  // a mamba3 checkpoint's model (eval mode), else null
  std::shared_ptr<const data::Tokenizer> tokenizer;
  int64_t iters = 0;                   // the optimizer steps it was trained for
};

/// `path`: a checkpoint file, or a run folder (its newest checkpoint). The
/// model config and the tokenizer come from the file's config; everything is
/// validated (kiln::Error "[load_lm] <path>: ..."): the config against
/// check_lm_size's bounds before anything is allocated, and the weights to be
/// finite (a diverged run's are refused).
LanguageModel load_lm(const std::string& path);

/// Sane bounds on a model, checked before it is built: each size at most
/// 2^20 (layers 1024, heads 4096) and at most 2^31 parameters (8 GiB of f32);
/// kiln::Error "[op] <what>: ..." naming the size.
void check_lm_size(const std::string& op, const std::string& what, const models::GPTConfig& config);

}  // namespace kiln::app
