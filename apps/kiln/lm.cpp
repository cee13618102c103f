#include "apps/kiln/lm.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <array>
#include <cmath>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "apps/kiln/distributed_job.h"
#include "apps/kiln/job_run.h"
#include "apps/kiln/job_support.h"
#include "apps/kiln/memory_flag.h"
#include "apps/kiln/resume_check.h"
#include "apps/kiln/run_folder.h"
#include "kiln/core/error.h"
#include "kiln/core/generator.h"
#include "kiln/core/parallel.h"
#include "kiln/core/replay.h"
#include "kiln/core/rngs.h"
#include "kiln/data/bpe_tokenizer.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/text.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/ops/binary.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/clip.h"
#include "kiln/optim/schedulers.h"
#include "kiln/train/callbacks/checkpoint.h"
#include "kiln/train/callbacks/csv_logger.h"
#include "kiln/train/callbacks/lr_scheduler.h"
#include "kiln/train/callbacks/moe_telemetry.h"
#include "kiln/train/callbacks/progress_bar.h"
#include "kiln/train/callbacks/stop_on_signal.h"
#include "kiln/train/callbacks/summary.h"
#include "kiln/train/callbacks/validation.h"
#include "kiln/train/compiled_step.h"
#include "kiln/train/signal_guard.h"
#include "kiln/train/steps.h"
#include "kiln/train/trainer.h"

namespace kiln::app {

namespace {

constexpr const char* kOp = "kiln train lm";
constexpr const char* kLoad = "load_lm";
using nlohmann::json;

// nanoGPT's get_batch as a data set: example i is the window of T tokens at
// offset o_i and the same window shifted by one (the targets), o_i uniform in
// [0, N - T) from block i of a counter-based Generator. An example depends
// only on (seed, i), so a DataLoader walking 0, 1, 2, ... in order draws
// nanoGPT's random batches, and its position (saved in every checkpoint) is
// the whole state of the batch stream: a resumed run sees the same batches.
class RandomWindows : public data::Dataset {
 public:
  // tokens [N] i64 (a split of the file's encoding), N > T.
  RandomWindows(std::shared_ptr<const data::TokenDataset> split, int64_t count, uint64_t seed)
      : split_(std::move(split)), count_(count), gen_(seed) {}

  int64_t size() const override { return count_; }
  data::Example get(int64_t index) const override {
    KILN_CHECK(index >= 0 && index < count_, "RandomWindows.get", "index {} is out of range for {} examples", index,
               count_);
    const Tensor& tokens = split_->tokens();
    const int64_t T = split_->seq_len(), starts = tokens.numel() - T;
    std::array<uint32_t, 4> b = gen_.block(uint64_t(index));
    // A 64-bit draw modulo ~1e6 starts: the bias is below 1e-13.
    const int64_t start = int64_t((uint64_t(b[0]) | (uint64_t(b[1]) << 32)) % uint64_t(starts));
    // Views of the tokens; the loader copies them into its batch.
    return {Tensor::make_view(tokens.storage(), {T}, {1}, tokens.storage_offset() + start, kI64),
            Tensor::make_view(tokens.storage(), {T}, {1}, tokens.storage_offset() + start + 1, kI64)};
  }

 private:
  std::shared_ptr<const data::TokenDataset> split_;
  int64_t count_;
  Generator gen_;  // only block(i) is used: never advanced
};

// Next-token steps on the language model (models::GPT or models::MambaLM):
// loss over all B * T positions, gradient clipping, one AdamW step.
class LmTask : public train::Task {
 public:
  // (idx, targets, training) -> the mean loss; training: dropout on.
  using LossFn = std::function<Tensor(const Tensor&, const Tensor&, bool)>;
  LmTask(nn::Module& model, train::Forward forward, LossFn loss, optim::Optimizer& opt, Rngs& rngs, double grad_clip)
      : Task(model, std::move(forward), opt, &rngs),
        loss_(std::move(loss)),
        params_(model.parameters()),
        grad_clip_(grad_clip) {}

  // --compile (docs/compile.md): training steps recorded once and replayed.
  // The step runs the backward before the finite checks (they read values,
  // so they are one launch that runs again at every replay): a finite step
  // is eager's, bit for bit; a non-finite one is not applied either way.
  void compile() {
    compiled_ = std::make_unique<train::CompiledStep>(
        [this](const std::vector<Tensor>& in) {
          Tensor loss = loss_(in[0], in[1], true);
          loss.backward();
          Tensor applied = Tensor::empty({}, kBool);
          auto update = [this, loss, applied] {
            bool ok = std::isfinite(loss.item<double>());
            if (ok)
              ok = grad_clip_ > 0 ? std::isfinite(optim::clip_grad_norm_(params_, grad_clip_))
                                  : train::grads_finite(optimizer());
            if (ok) optimizer().step();
            applied.data<bool>()[0] = ok;
          };
          if (replay::active()) replay::launch("lm.update", update);
          else update();
          optimizer().zero_grad();
          return std::vector<Tensor>{loss, applied};
        },
        train::CompileOptions{.modules = {&model()}});
  }
  const train::CompiledStep* compiled() const { return compiled_.get(); }
  std::string recapture() override {
    if (!compiled_) return Task::recapture();
    compiled_->request_recapture();
    return "the compiled step records again at the next step";
  }

  train::StepResult training_step(const data::Batch& b) override {
    if (compiled_) {
      std::vector<Tensor> out = (*compiled_)({b.input, b.target});
      return {out[0].item<double>(), b.size(), -1, out[1].item<bool>()};
    }
    Tensor loss = loss_(b.input, b.target, true);
    const double value = loss.item<double>();
    // A non-finite loss is never applied: the Trainer then stops the run or
    // skips the step (--on-nan) with the parameters as they were.
    if (!std::isfinite(value)) return {value, b.size(), -1};
    loss.backward();
    // Nor are gradients that overflowed (clip_grad_norm_'s norm is then inf or NaN).
    const bool finite = grad_clip_ > 0 ? std::isfinite(optim::clip_grad_norm_(params_, grad_clip_))
                                       : train::grads_finite(optimizer());
    if (finite) optimizer().step();
    optimizer().zero_grad();
    return {value, b.size(), -1, finite};
  }
  // The accumulation / data-parallel path (RunOptions::distributed): every
  // position counts, and the mean times B * T is the sum.
  int64_t valid_count(const data::Batch& b) override { return b.target.numel(); }
  train::LossSum loss_sum(const data::Batch& b) override {
    return {mul(loss_(b.input, b.target, true), double(b.target.numel())), -1};
  }
  bool prepare_step() override {  // on the gradients summed over the ranks
    return grad_clip_ > 0 ? std::isfinite(optim::clip_grad_norm_(params_, grad_clip_))
                          : train::grads_finite(optimizer());
  }
  // Called in eval mode under NoGradGuard (Validation).
  train::StepResult validation_step(const data::Batch& b) override {
    return {loss_(b.input, b.target, false).item<float>(), b.size(), -1};
  }

 private:
  LossFn loss_;
  nn::ParameterList params_;
  double grad_clip_;
  std::unique_ptr<train::CompiledStep> compiled_;
};

// The model's config as an object (CausalLMConfig's own JSON form).
json model_json(const models::GPTConfig& c) { return json::parse(c.to_json()); }

// What the checkpoint must agree with to be resumed (the loader and
// scheduler states check the rest); eval_interval may change.
json train_json(const LmOptions& o, int64_t tokens) {
  return {{"tokenizer", o.tokenizer}, {"tokens", tokens},           {"iters", o.iters},
          {"batch_size", o.batch_size}, {"lr", o.lr},               {"min_lr", o.min_lr},
          {"warmup", o.warmup},         {"weight_decay", o.weight_decay}, {"beta1", o.beta1},
          {"beta2", o.beta2},           {"grad_clip", o.grad_clip}, {"eval_iters", o.eval_iters},
          {"seed", o.seed}};
}

// The run's config (kiln.config in every checkpoint): the model, the
// tokenizer's own JSON text (kept as a string so it comes back byte for
// byte) and the training options.
std::string config_json(const json& model, const data::Tokenizer& tok, const LmOptions& o,
                        int64_t tokens, const json& overrides) {
  json j = {{"job", "lm"},
            {"model", model},
            {"tokenizer", tok.to_json()},
            {"train", train_json(o, tokens)},
            {"eval_interval", o.eval_interval}};
  if (!overrides.empty()) j["overrides"] = overrides;  // --override's record (apps/kiln/resume_check.h)
  return j.dump();
}

// The model and training parts of a config as one flat object, as
// check_resume compares them.
json hyper_parameters(const json& config) {
  json flat = json::object();
  for (const char* part : {"model", "train"}) {
    const json values = config.value(part, json::object());
    for (const auto& [key, value] : values.items()) flat[key] = value;
  }
  return flat;
}

// A checkpoint's config, parsed and checked to be this job's; errors are "[op] <path>: ...".
json read_config(const char* op, const std::string& path, io::CheckpointInfo& info) {
  info = io::read_checkpoint_info(path);
  json j = json::parse(info.config, nullptr, /*allow_exceptions=*/false);
  KILN_CHECK(j.is_object() && j.value("job", "") == "lm" && j.contains("model") && j["model"].is_object() &&
                 j.contains("tokenizer") && j["tokenizer"].is_string(),
             op, "{}: not a checkpoint of `kiln train lm` (its config is '{}')", path, info.config.substr(0, 80));
  return j;
}

models::GPTConfig model_from_json(const char* op, const std::string& path, const json& m) {
  models::GPTConfig config;
  try {
    config = models::GPTConfig::from_json(m.dump());
  } catch (const Error& e) {
    KILN_FAIL(op, "{}: its model config: {}", path, e.what());
  }
  check_lm_size(op, path + ": its model config", config);
  return config;
}

// A diverged run's weights (NaN or inf) would generate garbage.
void check_finite_weights(const char* op, const std::string& path, const nn::Module& model) {
  for (const auto& [name, value] : model.state_dict()) {
    if (!is_floating(value.dtype())) continue;
    const std::vector<double> v = value.to(kF64).contiguous().to_vector<double>();
    const bool finite = std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
    KILN_CHECK(finite, op,
               "{}: {} holds NaN or infinite values: the run diverged before this checkpoint; use an earlier one",
               path, name);
  }
}

// A batch of more tokens than this is refused before its buffers exist
// (GPT-3's batches were 3.2M tokens).
constexpr int64_t kMaxBatchTokens = int64_t(1) << 22;

// The checkpoint file `path` names: itself, or a run folder's newest.
std::string resolve_checkpoint(const char* op, const std::string& path) {
  namespace fs = std::filesystem;
  KILN_CHECK(fs::exists(path), op, "{}: no such file or folder", path);
  if (!fs::is_directory(path)) return path;
  const fs::path sub = fs::path(path) / "checkpoints";
  io::CheckpointManager manager(fs::is_directory(sub) ? sub.string() : path);
  KILN_CHECK(manager.latest().has_value(), op, "{}: no checkpoint in this folder", path);
  return *manager.latest();
}

// The most of a file `kiln train lm` reads: its ids (8 bytes a character)
// must fit in memory too, and a device such as /dev/zero never ends.
constexpr int64_t kMaxTextBytes = int64_t(1) << 28;  // 256 MiB

std::string read_text(const std::string& path) {
  KILN_CHECK(!std::filesystem::is_directory(path), kOp, "--data {} is a folder, not a text file", path);
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), kOp, "cannot read --data {}: {}", path,
             std::filesystem::exists(path) ? "not readable" : "no such file");
  auto too_long = [&] {
    return Error(kOp, fmt::format("--data {} is longer than {} bytes (256 MiB), the most `kiln train lm` reads", path,
                                  kMaxTextBytes));
  };
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) && int64_t(std::filesystem::file_size(path, ec)) > kMaxTextBytes)
    throw too_long();
  // In chunks, so that a device or pipe stops at the limit too.
  std::string text;
  std::array<char, 1 << 16> chunk;
  while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0) {
    text.append(chunk.data(), size_t(in.gcount()));
    if (int64_t(text.size()) > kMaxTextBytes) throw too_long();
  }
  return text;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

LmResult train_lm(const LmOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  LmOptions o = options;  // batch_size may come from --memory-budget
  KILN_CHECK(!o.data.empty(), kOp, "--data FILE is required");
  KILN_CHECK(o.tokenizer == "char" || o.tokenizer == "byte" || o.tokenizer == "bpe", kOp,
             "--tokenizer must be char, byte or bpe, got '{}'", o.tokenizer);
  KILN_CHECK(o.arch == "gpt" || o.arch == "mamba3", kOp, "--arch must be gpt or mamba3, got '{}'", o.arch);
  const bool mamba = o.arch == "mamba3";
  KILN_CHECK(!mamba || o.moe_experts == 0, kOp, "--moe-experts {} replaces a Transformer block's MLP; --arch mamba3 has none",
             o.moe_experts);
  KILN_CHECK(o.vocab_size >= 256, kOp, "--vocab-size must be at least 256 (the bytes), got {}", o.vocab_size);
  KILN_CHECK(o.iters > 0, kOp, "--iters must be positive, got {}", o.iters);
  KILN_CHECK(o.batch_size > 0, kOp, "--batch-size must be positive, got {}", o.batch_size);
  KILN_CHECK(o.block_size > 0, kOp, "--block-size must be positive, got {}", o.block_size);
  KILN_CHECK(o.n_layer > 0 && o.n_head > 0 && o.n_embd > 0, kOp,
             "--n-layer, --n-head and --n-embd must be positive, got {}, {}, {}", o.n_layer, o.n_head, o.n_embd);
  KILN_CHECK(mamba || o.n_embd % o.n_head == 0, kOp, "--n-embd {} is not a multiple of --n-head {}", o.n_embd, o.n_head);
  KILN_CHECK(o.dropout >= 0 && o.dropout < 1, kOp, "--dropout must be in [0, 1), got {}", o.dropout);
  KILN_CHECK(o.lr > 0 && std::isfinite(o.lr), kOp, "--lr must be a finite number in (0, inf), got {}", o.lr);
  KILN_CHECK(o.min_lr >= 0 && o.min_lr <= o.lr, kOp, "--min-lr must be in [0, --lr = {}], got {}", o.lr, o.min_lr);
  KILN_CHECK(o.warmup >= 0 && o.warmup < o.iters, kOp, "--warmup must be in [0, --iters = {}), got {}", o.iters,
             o.warmup);
  KILN_CHECK(o.weight_decay >= 0, kOp, "--weight-decay must be non-negative, got {}", o.weight_decay);
  KILN_CHECK(o.grad_clip >= 0, kOp, "--grad-clip must be non-negative, got {}", o.grad_clip);
  KILN_CHECK(o.eval_interval > 0, kOp, "--eval-interval must be positive, got {}", o.eval_interval);
  KILN_CHECK(o.eval_iters > 0, kOp, "--eval-iters must be positive, got {}", o.eval_iters);
  KILN_CHECK(o.threads >= 0, kOp, "--threads must be non-negative, got {}", o.threads);
  KILN_CHECK(o.iters <= 1'000'000'000, kOp, "--iters must be in [1, 1000000000], got {}", o.iters);
  KILN_CHECK(o.block_size <= (int64_t(1) << 20) && o.batch_size <= kMaxBatchTokens / o.block_size, kOp,
             "--batch-size {} x --block-size {} is more than {} tokens per step (2^22): the batch would not fit in "
             "memory",
             o.batch_size, o.block_size, kMaxBatchTokens);
  check_lm_size(kOp, "the model (--n-layer, --n-head, --n-embd, --block-size, --vocab-size)",
                {.vocab_size = o.tokenizer == "bpe" ? o.vocab_size : 256,
                 .block_size = o.block_size,
                 .n_layer = o.n_layer,
                 .n_head = o.n_head,
                 .n_embd = o.n_embd});
  const train::OnNan on_nan = parse_on_nan(kOp, o.on_nan);
  RunFolder::check_path(kOp, o.out);

  namespace fs = std::filesystem;
  // The text first: a missing file is reported before --out is touched.
  const std::string text = read_text(o.data);
  // Under mpirun: this rank's place (only rank 0 owns --out and prints).
  JobDistribution ranks(kOp);
  // Locked for the whole run; refuses a folder holding another run unless
  // resuming or overwriting it; finds the checkpoint to resume from.
  JobRunOptions run_options = job_run_options(kOp, "lm", o.out, o);
  run_options.primary = ranks.primary();
  JobRun run(run_options);
  std::ostream& log = run.log();
  const std::string csv = run.csv();
  const std::string ckpt_dir = run.checkpoint_dir();
  const std::string& resume = run.resume_path();

  // The tokenizer: trained on the whole file (nanoGPT's prepare.py), or the
  // checkpoint's when resuming, so a resumed run encodes the same ids.
  std::shared_ptr<const data::Tokenizer> tok;
  json resumed;
  if (!resume.empty()) {
    io::CheckpointInfo info;
    resumed = read_config(kOp, resume, info);  // an lm checkpoint with a model and a tokenizer
    tok = data::tokenizer_from_json(resumed["tokenizer"].get<std::string>());
  } else {
    tok = data::train_tokenizer(o.tokenizer, text, {.vocab_size = o.vocab_size});
  }
  std::vector<int64_t> ids;
  try {
    ids = tok->encode(text);
  } catch (const Error& e) {
    KILN_FAIL(kOp, "--data {}: {}", o.data, e.what());
  }
  // 90/10 split (nanoGPT: train = data[:int(n * 0.9)]). Each split needs a
  // window of T tokens plus the target after it.
  const int64_t n = int64_t(ids.size()), n_train = int64_t(double(n) * 0.9), n_val = n - n_train;
  KILN_CHECK(std::min(n_train, n_val) >= o.block_size + 1, kOp,
             "--data {} has {} tokens: its 90/10 split gives {} train and {} val tokens, and each needs more than "
             "--block-size {} (a window and its next token)",
             o.data, n, n_train, n_val, o.block_size);
  auto train_split = std::make_shared<data::TokenDataset>(std::vector<int64_t>(ids.begin(), ids.begin() + n_train),
                                                          tok, o.block_size);
  auto val_split =
      std::make_shared<data::TokenDataset>(std::vector<int64_t>(ids.begin() + n_train, ids.end()), tok, o.block_size);

  const models::GPTConfig cfg{.vocab_size = tok->vocab_size(),
                              .block_size = o.block_size,
                              .n_layer = o.n_layer,
                              .n_head = o.n_head,
                              .n_embd = o.n_embd,
                              .dropout = o.dropout,
                              .moe_experts = o.moe_experts,
                              .moe_top_k = o.moe_top_k,
                              .moe_hidden = o.moe_expert_width,
                              .moe_balance = o.moe_balance == "aux"    ? nn::MoEBalance::aux
                                             : o.moe_balance == "bias" ? nn::MoEBalance::bias
                                                                       : nn::MoEBalance::none,
                              .moe_aux_coef = o.moe_aux_coef,
                              .moe_z_coef = o.moe_z_coef,
                              .moe_bias_rate = o.moe_bias_rate};
  try {
    cfg.validate();
  } catch (const Error& e) {
    KILN_FAIL(kOp, "--moe-*: {}", e.what());
  }
  // On resume, name the first flag that differs (the loader and scheduler
  // would refuse the file too, with a less helpful message), unless
  // --override accepts it.
  models::MambaConfig mcfg;
  mcfg.d_model = o.n_embd;
  mcfg.n_layer = o.n_layer;
  mcfg.vocab_size = tok->vocab_size();
  mcfg.d_state = o.d_state;
  mcfg.headdim = o.headdim;
  if (mamba) {
    try {
      mcfg.validate();
    } catch (const Error& e) {
      KILN_FAIL(kOp, "--arch mamba3 (--n-embd, --d-state, --headdim): {}", e.what());
    }
  }
  // --memory-budget: the batch is picked below by probe steps; a resumed run
  // keeps the batch it was trained with (its loader state counts its batches).
  const int64_t memory_budget = o.memory_budget.empty() ? -1 : parse_memory_budget(kOp, o.memory_budget);
  if (memory_budget >= 0 && !resume.empty()) {
    o.batch_size = resumed["train"].value("batch_size", o.batch_size);
    fmt::print(log, "--memory-budget: resuming with the run's batch {}\n", o.batch_size);
  }
  const json mjson = mamba ? json::parse(mcfg.to_json()) : model_json(cfg);
  const json want = {{"model", mjson}, {"train", train_json(o, n)}};
  const json overrides = run.check_hyper_parameters(resume.empty() ? json::object() : hyper_parameters(resumed), hyper_parameters(want));

  // Streams: parameters, dropout, and the three batch streams (train steps,
  // the train and val estimates), all from --seed.
  Rngs rngs{{"params", o.seed}, {"dropout", o.seed + 1}};
  Rngs data_rngs{{"data", o.seed}};
  const uint64_t train_seed = data_rngs.next("data").next_u64(), train_eval_seed = data_rngs.next("data").next_u64(),
                 val_eval_seed = data_rngs.next("data").next_u64();
  std::shared_ptr<nn::Module> model;
  train::Forward forward;
  LmTask::LossFn loss_fn;
  std::vector<nn::MoE*> moe_layers;  // the GPT's MoE FFNs (--moe-experts), for the telemetry
  if (mamba) {
    auto m = std::make_shared<models::MambaLM>(mcfg, rngs);
    forward = [m](const Tensor& idx) { return m->forward(idx).first; };
    loss_fn = [m](const Tensor& idx, const Tensor& t, bool) { return m->loss(idx, t); };
    model = m;
  } else {
    auto gpt = std::make_shared<models::GPT>(cfg, rngs);
    forward = [gpt](const Tensor& idx) { return gpt->forward(idx); };
    loss_fn = [gpt, &rngs](const Tensor& idx, const Tensor& t, bool training) {
      return training && gpt->config.dropout > 0 ? gpt->loss(idx, t, rngs) : gpt->loss(idx, t);
    };
    moe_layers = gpt->moe_layers();
    model = gpt;
  }
  // nanoGPT's configure_optimizers: decay every tensor of 2 or more
  // dimensions (Linear weights, both embeddings), not the LayerNorm scales;
  // nor the parameters a model exempts (Mamba3's B/C biases, M11).
  nn::ParameterList all = model->parameters();
  auto decays = [](const nn::Parameter& p) { return p.value().dim() >= 2 && p.decay(); };
  auto matrices = all.filter([&](const std::string&, const nn::Parameter& p) { return decays(p); });
  auto others = all.filter([&](const std::string&, const nn::Parameter& p) { return !decays(p); });
  std::vector<optim::ParamGroup> groups = {{matrices, {{"weight_decay", o.weight_decay}}}};
  if (!others.empty()) groups.push_back({others, {{"weight_decay", 0.0}}});
  optim::AdamW opt(groups, {.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .weight_decay = o.weight_decay});
  LmTask task(*model, forward, loss_fn, opt, rngs, o.grad_clip);
  KILN_CHECK(!o.compile || !ranks.active(), kOp,
             "--compile records one process's step; under mpirun the gradients' all-reduce is not recorded");
  // --memory-budget: the largest batch (sequences of --block-size tokens)
  // whose peak fits, from three probe steps that leave the model, the
  // optimizer and the generators as they were; rank 0 probes, before the
  // model is wrapped, and every rank takes its choice.
  std::optional<train::MemoryFit> fit;  // rank 0's, when it probed
  if (memory_budget >= 0 && resume.empty()) {
    auto probe_set = std::make_shared<RandomWindows>(train_split, 1024, train_seed);
    fit.emplace();
    o.batch_size = fit_batch_to_memory(kOp, ranks, task, *probe_set, memory_budget,
                                       {.max_batch = kMaxBatchTokens / o.block_size}, log, "sequence", &*fit);
    if (!ranks.primary()) fit.reset();
  }
  if (o.compile) task.compile();
  std::shared_ptr<train::DistributedHooks> sync = ranks.wrap(*model);  // rank 0's weights, summed gradients
  auto schedule = std::make_shared<optim::LinearWarmupCosineScheduler>(optim::LinearWarmupCosineOptions{
      .target_lr = o.lr, .min_lr = o.min_lr, .warmup_steps = o.warmup, .total_steps = o.iters});

  // One epoch of `iters` batches; the estimates are fixed sets of eval_iters
  // batches, the same at every evaluation (less noise between evaluations
  // than nanoGPT's fresh draws, the same expected value). Under mpirun each
  // rank evaluates its share of every estimate batch and Validation sums the
  // ranks' results: the estimates are one process's.
  data::DataLoader train_loader(std::make_shared<RandomWindows>(train_split, o.iters * o.batch_size, train_seed),
                                {.batch_size = ranks.rank_batch(o.batch_size), .shuffle = false,
                                 .rank = ranks.rank(), .world_size = ranks.world_size()});
  auto eval_loader = [&](std::shared_ptr<const data::TokenDataset> split, uint64_t seed) {
    return std::make_shared<data::DataLoader>(
        std::make_shared<RandomWindows>(std::move(split), o.eval_iters * o.batch_size, seed),
        data::DataLoaderOptions{.batch_size = ranks.rank_batch(o.batch_size), .shuffle = false, .prefetch = 1,
                                .rank = ranks.rank(), .world_size = ranks.world_size()});
  };
  auto train_eval = std::make_shared<train::Validation>(
      eval_loader(train_split, train_eval_seed),
      train::ValidationOptions{.every_n_steps = o.eval_interval, .prefix = "train/"});
  auto val_eval = std::make_shared<train::Validation>(
      eval_loader(val_split, val_eval_seed), train::ValidationOptions{.every_n_steps = o.eval_interval});

  if (!resume.empty()) fmt::print(log, "resuming from {}\n", resume);
  run.folder().start(log);  // a new run: the previous one (--overwrite) moves aside
  // Only rank 0 writes metrics.csv and checkpoints; the other ranks resume
  // from rank 0's checkpoint (parts they do not register are not read).
  const bool writer = ranks.primary();
  auto checkpoints = writer ? std::make_shared<train::CheckpointCallback>(
                                  ckpt_dir, train::CheckpointCallbackOptions{.monitor = "val/loss",
                                                                             .every_n_steps = o.eval_interval,
                                                                             .restore_best = false})
                            : nullptr;
  // MoE telemetry (and the bias update) before the estimates, whose eval
  // forwards replace the layers' stats, and before the logger that writes them.
  auto moe_telemetry = std::make_shared<train::MoETelemetry>(moe_layers);
  std::vector<std::string> csv_keys = {"train/loss", "val/loss"};
  if (!moe_layers.empty())  // a dense model's metrics.csv keeps its columns
    for (const std::string& k : moe_telemetry->columns()) csv_keys.push_back(k);
  std::vector<std::shared_ptr<train::Callback>> callbacks = {
      std::make_shared<train::StopOnSignal>(),  // first: a signal stops the run after the step
      std::make_shared<train::LRSchedulerCallback>(schedule),
      moe_telemetry,
      // Before the bar and the logger: they show and log the estimates.
      train_eval,
      val_eval,
      std::make_shared<train::ProgressBar>(),
      writer ? std::make_shared<train::CsvLogger>(csv, train::CsvLoggerOptions{.append = false, .log_keys = csv_keys})
             : nullptr,
      std::make_shared<train::Summary>(),
      checkpoints,  // its checkpoints hold the other callbacks' state
      writer ? std::make_shared<ReleasePreviousRun>(run.folder(), checkpoints) : nullptr,
      fit ? std::make_shared<MemoryBudgetReport>(*fit) : nullptr,
  };
  std::erase(callbacks, nullptr);  // the writers, on ranks other than 0
  train::Trainer trainer(1, callbacks,
                         {.max_steps = o.iters,
                          .tokens_per_sample = o.block_size,
                          .out = &log,
                          .tty = o.tty,
                          .config = config_json(mjson, *tok, o, n, overrides),
                          .on_nan = on_nan,
                          .distributed = sync});

  const std::string shape = mamba ? fmt::format("mamba3: {} layers, width {}, d_state {}, headdim {}, context {}",
                                                mcfg.n_layer, mcfg.d_model, mcfg.d_state, mcfg.headdim, o.block_size)
                                  : fmt::format("{} layers, {} heads, width {}, context {}", cfg.n_layer, cfg.n_head,
                                                cfg.n_embd, cfg.block_size);
  fmt::print(log,
             "lm: {} parameters ({}) · {} tokenizer, vocabulary {} · {} train / "
             "{} val tokens · batch {} · {} iterations · {}{}\n",
             model->num_parameters(), shape, tok->name(), tok->vocab_size(), n_train, n_val, o.batch_size, o.iters,
             threads_and_cpu(), ranks.describe());

  train::SignalGuard signals;  // SIGINT/SIGTERM: finish the step, save, exit 130/143
  run.serve(trainer.control());  // kiln control RUN_DIR ... (docs/live_control.md)
  try {
    trainer.fit(task, train_loader, resume);
  } catch (const train::NonFiniteLoss& e) {
    fail_on_nan(kOp, e, checkpoints ? checkpoints->latest() : "");
  }

  LmResult r;
  r.batch_size = o.batch_size;
  r.val_loss = val_eval->result().loss;
  r.train_loss = train_eval->result().loss;
  r.iters = trainer.progress().global_step;
  r.train_seconds = trainer.elapsed();
  r.parameters = model->num_parameters();
  r.checkpoint = checkpoints ? checkpoints->latest() : "";
  r.csv = csv;
  r.wall_seconds = seconds_since(start);
  r.signal = train::SignalGuard::received();
  if (r.signal != 0)
    fmt::print(log, "stopped by {} at step {}: resume with --resume (from {})\n", train::SignalGuard::name(r.signal),
               r.iters, r.checkpoint);
  fmt::print(log, "val loss: {:.4f} · train loss {:.4f} ({} batches of {} x {} tokens each) · {} iterations\n",
             r.val_loss, r.train_loss, o.eval_iters, o.batch_size, o.block_size, r.iters);
  fmt::print(log, "time: {:.1f} s training, {:.1f} s wall (evaluations, tokenizer and checkpoints included)\n",
             r.train_seconds, r.wall_seconds);
  if (const train::CompiledStep* c = task.compiled(); c && c->recordings() > 0)
    fmt::print(log, "compiled step: {} recording{}, {} replays, {} eager steps\n{}", c->recordings(),
               c->recordings() == 1 ? "" : "s", c->replays(), c->eager_calls(), c->evidence().str());
  fmt::print(log, "wrote {} and {}\n", csv, r.checkpoint);
  return r;
}

LanguageModel load_lm(const std::string& path) {
  const std::string file = resolve_checkpoint(kLoad, path);
  io::CheckpointInfo info;
  json config = read_config(kLoad, file, info);
  LanguageModel lm;
  if (config["model"].value("arch", "") == "mamba3") {
    models::MambaConfig mc;
    try {
      mc = models::MambaConfig::from_json(config["model"].dump());
      lm.tokenizer = data::tokenizer_from_json(config["tokenizer"].get<std::string>());
    } catch (const Error& e) {
      KILN_FAIL(kLoad, "{}: its model config or tokenizer: {}", file, e.what());
    }
    KILN_CHECK(lm.tokenizer->vocab_size() == mc.vocab_size, kLoad,
               "{}: the tokenizer has {} tokens but the model's vocab_size is {}", file, lm.tokenizer->vocab_size(),
               mc.vocab_size);
    lm.config.vocab_size = mc.vocab_size;
    lm.config.n_layer = mc.n_layer;
    lm.config.n_embd = mc.d_model;
    Rngs rngs(0);  // the initial values are overwritten by the load
    lm.mamba = std::make_shared<models::MambaLM>(mc, rngs);
    io::Checkpoint ckpt;
    ckpt.model(*lm.mamba);
    ckpt.load(file);
    check_finite_weights(kLoad, file, *lm.mamba);
    lm.mamba->eval();
    lm.iters = info.progress.global_step;
    return lm;
  }
  lm.config = model_from_json(kLoad, file, config["model"]);
  try {
    lm.tokenizer = data::tokenizer_from_json(config["tokenizer"].get<std::string>());
  } catch (const Error& e) {
    KILN_FAIL(kLoad, "{}: its tokenizer: {}", file, e.what());
  }
  KILN_CHECK(lm.tokenizer->vocab_size() == lm.config.vocab_size, kLoad,
             "{}: the tokenizer has {} tokens but the model's vocab_size is {}", file, lm.tokenizer->vocab_size(),
             lm.config.vocab_size);
  Rngs rngs(0);  // the initial values are overwritten by the load
  lm.model = std::make_shared<models::GPT>(lm.config, rngs);
  io::Checkpoint ckpt;
  ckpt.model(*lm.model);
  ckpt.load(file);
  check_finite_weights(kLoad, file, *lm.model);
  lm.model->eval();
  lm.iters = info.progress.global_step;
  return lm;
}

void check_lm_size(const std::string& op, const std::string& what, const models::GPTConfig& c) {
  constexpr int64_t kMaxSize = int64_t(1) << 20;
  auto in = [](int64_t v, int64_t hi) { return v >= 1 && v <= hi; };
  KILN_CHECK(in(c.vocab_size, kMaxSize) && in(c.block_size, kMaxSize) && in(c.n_embd, kMaxSize) &&
                 in(c.n_layer, 1024) && in(c.n_head, 4096) && c.mlp_hidden >= 0 && c.mlp_hidden <= kMaxSize,
             op,
             "{}: vocab_size {}, block_size {}, n_embd {} and mlp_hidden must be in [1, 2^20], n_layer {} in "
             "[1, 1024], n_head {} in [1, 4096]",
             what, c.vocab_size, c.block_size, c.n_embd, c.n_layer, c.n_head);
  // Every matrix of the model, in doubles (no overflow): embeddings, the
  // untied head, and per block attention (4 C^2) and the MLP (up to 3 C H).
  const double C = double(c.n_embd),
               H = c.moe_experts > 0 ? double(c.moe_experts) * double(c.moe_options().expert_hidden) : double(c.hidden());
  const double params = double(c.vocab_size + c.block_size) * C + double(c.vocab_size) * C +
                        double(c.n_layer) * (4 * C * C + 3 * C * H);
  KILN_CHECK(params <= double(int64_t(1) << 31), op,
             "{}: about {:.3g} parameters, more than 2^31 (8 GiB of f32) (n_layer {}, n_embd {}, vocab_size {})", what,
             params, c.n_layer, c.n_embd, c.vocab_size);
}

}  // namespace kiln::app
