#include "apps/kiln/flow.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/kiln/job_run.h"
#include "apps/kiln/job_support.h"
#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/core/rngs.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/io/image.h"
#include "kiln/models/classifiers.h"
#include "kiln/models/flow.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/norm.h"
#include "kiln/nn/pool.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
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
#include "kiln/train/signal_guard.h"
#include "kiln/train/steps.h"
#include "kiln/train/trainer.h"

namespace kiln::app {

namespace {

constexpr const char* kOp = "kiln train flow";
constexpr const char* kSample = "kiln sample flow";
constexpr const char* kEval = "kiln eval flow";
constexpr const char* kLoad = "load_flow";
constexpr int64_t kClasses = 10;

using nlohmann::json;

models::FlowSolver parse_solver(const char* op, const std::string& s) {
  KILN_CHECK(s == "euler" || s == "heun", op, "--solver must be euler or heun, got '{}'", s);
  return s == "euler" ? models::FlowSolver::euler : models::FlowSolver::heun;
}

json config_json(const models::DiTConfig& c) {
  return {{"image_size", c.image_size},   {"in_channels", c.in_channels},   {"patch_size", c.patch_size},
          {"hidden_size", c.hidden_size}, {"depth", c.depth},               {"num_heads", c.num_heads},
          {"mlp_ratio", c.mlp_ratio},     {"num_classes", c.num_classes},   {"class_dropout", c.class_dropout},
          {"learned_pos_embed", c.learned_pos_embed}, {"frequency_dim", c.frequency_dim},
          {"time_scale", c.time_scale},   {"moe_experts", c.moe_experts},   {"moe_top_k", c.moe_top_k}};
}

models::DiTConfig config_from_json(const char* op, const std::string& file, const json& j) {
  models::DiTConfig c;
  try {
    c.image_size = j.at("image_size").get<int64_t>();
    c.in_channels = j.at("in_channels").get<int64_t>();
    c.patch_size = j.at("patch_size").get<int64_t>();
    c.hidden_size = j.at("hidden_size").get<int64_t>();
    c.depth = j.at("depth").get<int64_t>();
    c.num_heads = j.at("num_heads").get<int64_t>();
    c.mlp_ratio = j.at("mlp_ratio").get<double>();
    c.num_classes = j.at("num_classes").get<int64_t>();
    c.class_dropout = j.at("class_dropout").get<double>();
    c.learned_pos_embed = j.at("learned_pos_embed").get<bool>();
    c.frequency_dim = j.at("frequency_dim").get<int64_t>();
    c.time_scale = j.at("time_scale").get<double>();
    c.moe_experts = j.value("moe_experts", int64_t(0));
    c.moe_top_k = j.value("moe_top_k", int64_t(2));
  } catch (const json::exception& e) {
    KILN_FAIL(op, "{}: its model config: {}", file, e.what());
  }
  auto in = [](int64_t v, int64_t hi) { return v >= 1 && v <= hi; };
  KILN_CHECK(in(c.image_size, 4096) && in(c.in_channels, 64) && in(c.patch_size, 4096) &&
                 in(c.hidden_size, 1 << 16) && in(c.depth, 1024) && in(c.num_heads, 4096) &&
                 in(c.frequency_dim, 1 << 16) && c.num_classes >= 0 && c.num_classes <= (1 << 20) &&
                 c.mlp_ratio > 0 && c.mlp_ratio <= 64,
             op, "{}: its model config is out of range: {}", file, j.dump());
  return c;
}

// The newest checkpoint of a run folder, or the file itself.
std::string resolve(const char* op, const std::string& path) {
  namespace fs = std::filesystem;
  KILN_CHECK(!path.empty(), op, "--checkpoint PATH is required");
  KILN_CHECK(fs::exists(path), op, "{}: no such file or folder", path);
  if (!fs::is_directory(path)) return path;
  const fs::path sub = fs::path(path) / "checkpoints";
  io::CheckpointManager manager(fs::is_directory(sub) ? sub.string() : path);
  KILN_CHECK(manager.latest().has_value(), op, "{}: no checkpoint in this folder", path);
  return *manager.latest();
}

// Model images in [-1, 1] -> [0, 1] for pictures and the classifier.
Tensor to_unit(const Tensor& x) { return clamp(mul(add(x, 1.0), 0.5), 0.0, 1.0); }

// 10 per class, class-major: row c of a 10-wide grid is class c.
Tensor grid_labels(int64_t per_class) {
  std::vector<int64_t> y;
  for (int64_t c = 0; c < kClasses; ++c)
    for (int64_t i = 0; i < per_class; ++i) y.push_back(c);
  return tensor(y, {int64_t(y.size())});
}

// Flow-matching steps on a DiT: x1 = pixels scaled to [-1, 1], (x_t, t, x1 - x0)
// from FlowPath ("flow" stream), labels dropped for CFG ("label_dropout"),
// gradient clipping, one AdamW step.
class FlowTask : public train::Task {
 public:
  FlowTask(models::DiT& dit, optim::Optimizer& opt, Rngs& rngs, models::FlowPath path, double grad_clip)
      : Task(dit, [](const Tensor& x) -> Tensor { return x; }, opt, &rngs),
        dit_(dit),
        path_(std::move(path)),
        params_(dit.parameters()),
        grad_clip_(grad_clip) {}

  train::StepResult training_step(const data::Batch& b) override {
    Tensor x1 = sub(mul(b.input, 2.0), 1.0);
    models::FlowSample s = path_.sample(x1, *rngs());
    Tensor v = dit_.forward(s.xt, s.t, b.target, *rngs());
    Tensor loss = add(path_.loss(v, s), dit_.aux_loss());  // + the MoE balancing losses (0 when dense)
    const double value = loss.item<double>();
    if (!std::isfinite(value)) return {value, b.size(), -1};
    loss.backward();
    const bool finite = grad_clip_ > 0 ? std::isfinite(optim::clip_grad_norm_(params_, grad_clip_))
                                       : train::grads_finite(optimizer());
    if (finite) optimizer().step();
    optimizer().zero_grad();
    return {value, b.size(), -1, finite};
  }

 private:
  models::DiT& dit_;
  models::FlowPath path_;
  nn::ParameterList params_;
  double grad_clip_;
};

// After each epoch: 10 samples per class (one class per row), seeded so that
// the grids of successive epochs show the same noise.
class SampleGrid : public train::Callback {
 public:
  SampleGrid(models::DiT& dit, std::string dir, models::DiTSampleOptions options, std::ostream& log)
      : dit_(dit), dir_(std::move(dir)), options_(options), log_(log) {}
  void on_epoch_end(train::Trainer& trainer) override {
    std::filesystem::create_directories(dir_);
    const std::string path = fmt::format("{}/epoch_{:03d}.png", dir_, trainer.progress().epoch + 1);
    Tensor x = models::sample_dit(dit_, grid_labels(10), options_);
    io::save_image_grid(path, to_unit(x), /*nrow=*/10);
    last_ = path;
    fmt::print(log_, "samples: {}\n", path);
  }
  const std::string& last() const { return last_; }

 private:
  models::DiT& dit_;
  std::string dir_;
  models::DiTSampleOptions options_;
  std::ostream& log_;
  std::string last_;
};

std::shared_ptr<const data::FashionMNIST> load_split(const std::string& root_opt, bool train, int64_t limit) {
  const std::string root = root_opt.empty() ? data::FashionMNIST::default_root() : root_opt;
  return std::make_shared<data::FashionMNIST>(root, train,
                                              data::FashionMNISTOptions{.normalize = false, .limit = limit});
}

}  // namespace

FlowTrainResult train_flow(const FlowTrainOptions& o) {
  KILN_CHECK(o.dataset == "fashion-mnist", kOp, "dataset must be fashion-mnist, got '{}'", o.dataset);
  KILN_CHECK(o.epochs >= 1 && o.epochs <= 1'000'000, kOp, "--epochs must be in [1, 1000000], got {}", o.epochs);
  KILN_CHECK(o.batch_size > 0, kOp, "--batch-size must be positive, got {}", o.batch_size);
  KILN_CHECK(o.lr > 0 && std::isfinite(o.lr), kOp, "--lr must be a finite number in (0, inf), got {}", o.lr);
  KILN_CHECK(o.weight_decay >= 0 && std::isfinite(o.weight_decay), kOp, "--weight-decay must be >= 0, got {}",
             o.weight_decay);
  KILN_CHECK(o.grad_clip >= 0 && std::isfinite(o.grad_clip), kOp, "--grad-clip must be >= 0, got {}", o.grad_clip);
  KILN_CHECK(o.pos_embed == "sincos" || o.pos_embed == "learned", kOp, "--pos-embed must be sincos or learned, got '{}'",
             o.pos_embed);
  KILN_CHECK(o.time_sampling == "uniform" || o.time_sampling == "logit-normal", kOp,
             "--time-sampling must be uniform or logit-normal, got '{}'", o.time_sampling);
  KILN_CHECK(o.sample_steps >= 1, kOp, "--sample-steps must be at least 1, got {}", o.sample_steps);
  KILN_CHECK(std::isfinite(o.guidance), kOp, "--guidance must be finite, got {}", o.guidance);
  KILN_CHECK(o.limit >= 0, kOp, "--limit must be non-negative, got {}", o.limit);
  const models::FlowSolver solver = parse_solver(kOp, o.solver);
  const train::OnNan on_nan = parse_on_nan(kOp, o.on_nan);
  RunFolder::check_path(kOp, o.out);

  const models::DiTConfig dit_config{.image_size = 28,
                                     .in_channels = 1,
                                     .patch_size = o.patch,
                                     .hidden_size = o.hidden,
                                     .depth = o.depth,
                                     .num_heads = o.heads,
                                     .num_classes = kClasses,
                                     .class_dropout = o.class_dropout,
                                     .learned_pos_embed = o.pos_embed == "learned",
                                     .moe_experts = o.moe_experts,
                                     .moe_top_k = o.moe_top_k};
  // The model is built (and its config checked) before the data is read or --out touched.
  Rngs rngs{{"params", o.seed}, {"flow", o.seed + 1}, {"label_dropout", o.seed + 2}};
  auto dit = std::make_shared<models::DiT>(dit_config, rngs);
  if (o.bf16) dit->set_compute_dtype(kBF16);
  KILN_CHECK(o.guidance == 1.0 || o.class_dropout > 0, kOp,
             "--guidance {} needs label dropout in training (--class-dropout > 0)", o.guidance);

  auto train_set = load_split(o.data, true, o.limit);
  JobRun run(job_run_options(kOp, "flow", o.out, o));
  std::ostream& log = run.log();
  const std::string& resume = run.resume_path();
  const int64_t batch_size = std::min(o.batch_size, train_set->size());
  data::DataLoader loader(train_set, {.batch_size = batch_size, .shuffle = true, .seed = o.seed});

  json hyper = {{"batch_size", batch_size},   {"lr", o.lr},         {"weight_decay", o.weight_decay},
                {"grad_clip", o.grad_clip},   {"seed", o.seed},     {"limit", o.limit},
                {"time_sampling", o.time_sampling}, {"bf16", o.bf16}};
  json model = config_json(dit_config);
  json wanted = hyper;
  wanted["model"] = model.dump();  // flat: the architecture must match to resume
  json saved = run.saved_config().is_object() ? run.saved_config() : json();
  if (saved.is_object() && saved.contains("model")) saved["model"] = saved["model"].dump();
  if (saved.is_object()) {
    for (const char* k : {"job", "epochs", "overrides", "dataset"}) saved.erase(k);
  }
  const json overrides = run.check_hyper_parameters(saved, wanted);
  json config = hyper;
  config["model"] = model;
  config["job"] = "flow";
  config["dataset"] = o.dataset;
  config["epochs"] = o.epochs;
  if (!overrides.empty()) config["overrides"] = overrides;

  optim::AdamW opt(dit->parameters(), {.lr = o.lr, .weight_decay = o.weight_decay});
  models::FlowPath path({.time_sampling = o.time_sampling == "uniform" ? models::TimeSampling::uniform
                                                                        : models::TimeSampling::logit_normal});
  FlowTask task(*dit, opt, rngs, path, o.grad_clip);
  auto schedule = std::make_shared<optim::CosineScheduler>(
      optim::CosineOptions{.max_lr = o.lr, .min_lr = o.lr / 10, .total_steps = o.epochs * loader.size()});

  if (!resume.empty()) fmt::print(log, "resuming from {}\n", resume);
  run.folder().start(log);
  auto checkpoints = std::make_shared<train::CheckpointCallback>(
      run.checkpoint_dir(), train::CheckpointCallbackOptions{.restore_best = false, .loss_name = "flow_mse"});
  std::shared_ptr<SampleGrid> grids;
  auto moe_telemetry = std::make_shared<train::MoETelemetry>(dit->moe_layers());
  std::vector<std::shared_ptr<train::Callback>> callbacks = {
      std::make_shared<train::StopOnSignal>(),
      std::make_shared<train::LRSchedulerCallback>(schedule),
      moe_telemetry,  // the bias updates and the routing columns (nothing when dense)
      std::make_shared<train::ProgressBar>(),
      std::make_shared<train::CsvLogger>(run.csv(),
                                         train::CsvLoggerOptions{.append = false, .log_keys = dit->moe_layers().empty()
                                                                                   ? std::vector<std::string>{}
                                                                                   : moe_telemetry->columns()}),
      std::make_shared<train::Summary>(),
  };
  if (o.grids) {
    grids = std::make_shared<SampleGrid>(
        *dit, (run.path() / "samples").string(),
        models::DiTSampleOptions{.steps = o.sample_steps, .solver = solver, .guidance = o.guidance, .seed = o.seed},
        log);
    callbacks.push_back(grids);
  }
  callbacks.push_back(checkpoints);
  callbacks.push_back(std::make_shared<ReleasePreviousRun>(run.folder(), checkpoints));
  train::Trainer trainer(o.epochs, callbacks, {.out = &log, .tty = o.tty, .config = config.dump(), .on_nan = on_nan});

  fmt::print(log, "DiT (D {}, depth {}, heads {}, patch {}{}): {} parameters · {} images · batch {} · {} epoch{} · {}\n",
             o.hidden, o.depth, o.heads, o.patch, o.bf16 ? ", bf16 compute" : "", dit->num_parameters(), train_set->size(), batch_size, o.epochs,
             o.epochs == 1 ? "" : "s", threads_and_cpu());
  train::SignalGuard signals;
  run.serve(trainer.control());
  train::History history;
  try {
    history = trainer.fit(task, loader, resume);
  } catch (const train::NonFiniteLoss& e) {
    fail_on_nan(kOp, e, checkpoints->latest());
  }
  FlowTrainResult r;
  const auto& epochs = history.epochs;
  r.loss = epochs.empty() ? std::nan("") : epochs.back().at("loss");
  r.epochs = trainer.progress().epoch;
  r.train_seconds = trainer.elapsed();
  r.checkpoint = checkpoints->latest();
  r.csv = run.csv();
  r.grid = grids ? grids->last() : "";
  r.signal = train::SignalGuard::received();
  if (r.signal != 0)
    fmt::print(log, "stopped by {} at step {}: resume with --resume (from {})\n", train::SignalGuard::name(r.signal),
               trainer.progress().global_step, r.checkpoint);
  fmt::print(log, "wrote {} and {}\n", r.csv, r.checkpoint);
  return r;
}

LoadedFlow load_flow(const std::string& path) {
  LoadedFlow f;
  f.file = resolve(kLoad, path);
  io::CheckpointInfo info = io::read_checkpoint_info(f.file);
  json j = json::parse(info.config, nullptr, /*allow_exceptions=*/false);
  KILN_CHECK(j.is_object() && j.value("job", "") == "flow" && j.contains("model") && j["model"].is_object(), kLoad,
             "{}: not a checkpoint of `kiln train flow` (its config is '{}')", f.file, info.config.substr(0, 80));
  const models::DiTConfig c = config_from_json(kLoad, f.file, j["model"]);
  Rngs rngs(0);  // overwritten by the load
  f.model = std::make_shared<models::DiT>(c, rngs);
  io::Checkpoint ckpt;
  ckpt.model(*f.model);
  ckpt.load(f.file);
  f.model->eval();
  f.steps = info.progress.global_step;
  return f;
}

Tensor sample_flow_grid(const FlowSampleJobOptions& o) {
  KILN_CHECK(o.n >= 1 && o.n <= 100000, kSample, "--n must be in [1, 100000], got {}", o.n);
  KILN_CHECK(o.nrow >= 1, kSample, "--nrow must be positive, got {}", o.nrow);
  KILN_CHECK(o.steps >= 1, kSample, "--steps must be at least 1, got {}", o.steps);
  KILN_CHECK(!o.out.empty(), kSample, "--out must name a PNG file");
  const models::FlowSolver solver = parse_solver(kSample, o.solver);
  if (o.threads > 0) set_num_threads(o.threads);
  std::ostream& log = o.log ? *o.log : std::cout;
  LoadedFlow f = load_flow(o.checkpoint);
  const int64_t K = f.model->config.num_classes;
  KILN_CHECK(o.class_id >= -1 && o.class_id < std::max<int64_t>(K, 1), kSample,
             "--class {} out of range: the model has {} classes (0..{}; -1: each in turn)", o.class_id, K, K - 1);
  Tensor labels;
  if (K > 0) {
    std::vector<int64_t> y(static_cast<size_t>(o.n));
    for (int64_t i = 0; i < o.n; ++i) y[size_t(i)] = o.class_id >= 0 ? o.class_id : i % K;
    labels = tensor(y, {o.n});
  }
  Tensor x;
  try {
    x = models::sample_dit(*f.model, labels,
                           {.steps = o.steps, .solver = solver, .guidance = o.guidance, .seed = o.seed}, o.n);
  } catch (const Error& e) {
    KILN_FAIL(kSample, "{}", e.what());
  }
  Tensor img = to_unit(x);
  io::save_image_grid(o.out, img, o.nrow);
  fmt::print(log, "wrote {}: {} samples{} · {} {} steps · guidance {} · seed {} (from {}, step {})\n", o.out, o.n,
             o.class_id >= 0 ? fmt::format(" of class {}", o.class_id) : "", o.solver, o.steps, o.guidance, o.seed,
             f.file, f.steps);
  return img;
}

// ---- quality ----

namespace {

// Symmetric eigen-decomposition by cyclic Jacobi rotations: a [n, n] row-major
// (destroyed) -> eigenvalues w [n], eigenvectors as the columns of v.
void jacobi_eigh(std::vector<double>& a, int64_t n, std::vector<double>& w, std::vector<double>& v) {
  v.assign(size_t(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i * n + i)] = 1.0;
  auto A = [&](int64_t i, int64_t j) -> double& { return a[size_t(i * n + j)]; };
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, total = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) (i == j ? total : off) += A(i, j) * A(i, j);
    if (off <= 1e-26 * (total + off) || off == 0) break;
    for (int64_t p = 0; p < n - 1; ++p) {
      for (int64_t q = p + 1; q < n; ++q) {
        const double apq = A(p, q);
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (A(q, q) - A(p, p)) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t k = 0; k < n; ++k) {  // columns p, q
          const double akp = A(k, p), akq = A(k, q);
          A(k, p) = c * akp - s * akq;
          A(k, q) = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {  // rows p, q
          const double apk = A(p, k), aqk = A(q, k);
          A(p, k) = c * apk - s * aqk;
          A(q, k) = s * apk + c * aqk;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double vkp = v[size_t(k * n + p)], vkq = v[size_t(k * n + q)];
          v[size_t(k * n + p)] = c * vkp - s * vkq;
          v[size_t(k * n + q)] = s * vkp + c * vkq;
        }
      }
    }
  }
  w.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) w[size_t(i)] = A(i, i);
}

// Mean [F] and covariance [F, F] (unbiased) of rows x [N, F], in f64.
void moments(const Tensor& x, std::vector<double>& mu, std::vector<double>& cov) {
  const int64_t N = x.size(0), F = x.size(1);
  std::vector<double> d = x.to_vector<double>();
  mu.assign(size_t(F), 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t f = 0; f < F; ++f) mu[size_t(f)] += d[size_t(i * F + f)];
  for (double& m : mu) m /= double(N);
  cov.assign(size_t(F * F), 0.0);
  for (int64_t i = 0; i < N; ++i) {
    const double* r = d.data() + i * F;
    for (int64_t a = 0; a < F; ++a) {
      const double da = r[a] - mu[size_t(a)];
      for (int64_t b = a; b < F; ++b) cov[size_t(a * F + b)] += da * (r[b] - mu[size_t(b)]);
    }
  }
  for (int64_t a = 0; a < F; ++a)
    for (int64_t b = a; b < F; ++b) {
      cov[size_t(a * F + b)] /= double(N - 1);
      cov[size_t(b * F + a)] = cov[size_t(a * F + b)];
    }
}

// Features [N, hidden] (the ReLU before the last Dropout + Linear) and logits
// [N, 10] of kiln's image_cnn, in eval mode, input pixels in [0, 1].
struct CnnOutputs {
  Tensor features, logits;
};

CnnOutputs run_cnn(nn::Sequential& cnn, const Tensor& unit) {
  NoGradGuard ng;
  Tensor h = div(sub(unit, data::FashionMNIST::kMean), data::FashionMNIST::kStd);
  CnnOutputs out;
  const size_t n = cnn.size();
  for (size_t i = 0; i < n; ++i) {
    nn::Module& m = cnn[i];
    if (auto* c = dynamic_cast<nn::Conv2d*>(&m)) h = c->forward(h);
    else if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) h = bn->forward(h);
    else if (dynamic_cast<nn::ReLU*>(&m)) h = relu(h);
    else if (auto* mp = dynamic_cast<nn::MaxPool2d*>(&m)) h = mp->forward(h);
    else if (auto* fl = dynamic_cast<nn::Flatten*>(&m)) h = fl->forward(h);
    else if (dynamic_cast<nn::Dropout*>(&m)) { /* eval: identity */ }
    else if (auto* l = dynamic_cast<nn::Linear*>(&m)) {
      if (i + 1 == n) out.features = h;  // the input of the last Linear
      h = l->forward(h);
    } else {
      KILN_FAIL(kEval, "the classifier has a layer this measure does not know: {}", m.repr());
    }
  }
  out.logits = h;
  return out;
}

// Applies the CNN in batches of 500.
CnnOutputs classify(nn::Sequential& cnn, const Tensor& unit) {
  std::vector<Tensor> f, l;
  for (int64_t s = 0; s < unit.size(0); s += 500) {
    CnnOutputs o = run_cnn(cnn, narrow(unit, 0, s, std::min<int64_t>(500, unit.size(0) - s)));
    f.push_back(o.features);
    l.push_back(o.logits);
  }
  return {cat(f), cat(l)};
}

}  // namespace

double frechet_distance(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1) && a.size(0) > 1 && b.size(0) > 1,
             "frechet_distance", "features a {} and b {} must be [N, F] with the same F and N > 1",
             to_string(a.shape()), to_string(b.shape()));
  const int64_t F = a.size(1);
  std::vector<double> ma, ca, mb, cb;
  moments(a, ma, ca);
  moments(b, mb, cb);
  // S_a^1/2 = V diag(sqrt(max(w, 0))) V^T.
  std::vector<double> w, v, tmp = ca;
  jacobi_eigh(tmp, F, w, v);
  std::vector<double> ra(size_t(F * F), 0.0);
  for (int64_t i = 0; i < F; ++i)
    for (int64_t j = 0; j < F; ++j) {
      double s = 0;
      for (int64_t k = 0; k < F; ++k) s += v[size_t(i * F + k)] * std::sqrt(std::max(w[size_t(k)], 0.0)) * v[size_t(j * F + k)];
      ra[size_t(i * F + j)] = s;
    }
  // M = S_a^1/2 S_b S_a^1/2 (symmetric PSD); tr(M^1/2) = sum sqrt(eig(M)).
  std::vector<double> t1(size_t(F * F), 0.0), m(size_t(F * F), 0.0);
  for (int64_t i = 0; i < F; ++i)
    for (int64_t k = 0; k < F; ++k) {
      const double r = ra[size_t(i * F + k)];
      for (int64_t j = 0; j < F; ++j) t1[size_t(i * F + j)] += r * cb[size_t(k * F + j)];
    }
  for (int64_t i = 0; i < F; ++i)
    for (int64_t k = 0; k < F; ++k) {
      const double r = t1[size_t(i * F + k)];
      for (int64_t j = 0; j < F; ++j) m[size_t(i * F + j)] += r * ra[size_t(k * F + j)];
    }
  for (int64_t i = 0; i < F; ++i)  // symmetrise the rounding
    for (int64_t j = i + 1; j < F; ++j) m[size_t(i * F + j)] = m[size_t(j * F + i)] =
        0.5 * (m[size_t(i * F + j)] + m[size_t(j * F + i)]);
  std::vector<double> wm, vm;
  jacobi_eigh(m, F, wm, vm);
  double tr_sqrt = 0, tr = 0, d2 = 0;
  for (double x : wm) tr_sqrt += std::sqrt(std::max(x, 0.0));
  for (int64_t i = 0; i < F; ++i) {
    tr += ca[size_t(i * F + i)] + cb[size_t(i * F + i)];
    d2 += (ma[size_t(i)] - mb[size_t(i)]) * (ma[size_t(i)] - mb[size_t(i)]);
  }
  return d2 + tr - 2 * tr_sqrt;
}

FlowQuality evaluate_flow(const FlowEvalOptions& o) {
  KILN_CHECK(o.per_class >= 1, kEval, "--per-class must be positive, got {}", o.per_class);
  KILN_CHECK(o.real >= 2, kEval, "--real must be at least 2, got {}", o.real);
  KILN_CHECK(!o.classifier.empty(), kEval, "--classifier PATH (a `kiln train fashion-mnist` run or checkpoint) is required");
  const models::FlowSolver solver = parse_solver(kEval, o.solver);
  if (o.threads > 0) set_num_threads(o.threads);
  std::ostream& log = o.log ? *o.log : std::cout;

  LoadedFlow f = load_flow(o.checkpoint);
  KILN_CHECK(f.model->config.num_classes == kClasses && f.model->config.image_size == 28, kEval,
             "{}: not a Fashion-MNIST model (num_classes {}, image_size {})", f.file, f.model->config.num_classes,
             f.model->config.image_size);
  const std::string cfile = resolve(kEval, o.classifier);
  io::CheckpointInfo cinfo = io::read_checkpoint_info(cfile);
  json cj = json::parse(cinfo.config, nullptr, false);
  KILN_CHECK(cj.is_object() && cj.value("job", "") == "fashion-mnist" && cj.value("model", "") == "cnn", kEval,
             "--classifier {}: not a checkpoint of `kiln train fashion-mnist --model cnn` (its config is '{}')", cfile,
             cinfo.config.substr(0, 80));
  Rngs rngs(0);
  auto cnn = models::image_cnn(rngs);
  io::Checkpoint ckpt;
  ckpt.model(*cnn);
  ckpt.load(cfile);
  cnn->eval();

  // Generated: per_class of each class, in batches of at most 100 (memory).
  std::vector<Tensor> gen;
  const Tensor labels = grid_labels(o.per_class);
  const int64_t total = labels.size(0);
  for (int64_t s = 0; s < total; s += 100) {
    const int64_t n = std::min<int64_t>(100, total - s);
    Tensor x = models::sample_dit(*f.model, narrow(labels, 0, s, n).contiguous(),
                                  {.steps = o.steps, .solver = solver, .guidance = o.guidance, .seed = o.seed + uint64_t(s)});
    gen.push_back(to_unit(x));
  }
  CnnOutputs g = classify(*cnn, cat(gen));
  std::vector<int64_t> pred = argmax(g.logits, 1).to_vector<int64_t>(), want = labels.to_vector<int64_t>();
  FlowQuality q;
  q.samples = total;
  q.per_class.assign(size_t(kClasses), 0.0);
  int64_t agree = 0;
  for (int64_t i = 0; i < total; ++i)
    if (pred[size_t(i)] == want[size_t(i)]) {
      ++agree;
      q.per_class[size_t(want[size_t(i)])] += 1.0 / double(o.per_class);
    }
  q.label_agreement = double(agree) / double(total);

  auto test = load_split(o.data, false, o.real);
  auto train = load_split(o.data, true, o.real);
  auto images = [](const data::FashionMNIST& d) { return div(to(d.images(), kF32), 255.0); };
  CnnOutputs te = classify(*cnn, images(*test)), tr = classify(*cnn, images(*train));
  q.frechet = frechet_distance(g.features, te.features);
  q.frechet_baseline = frechet_distance(tr.features, te.features);
  fmt::print(log, "label agreement: {:.4f} over {} samples ({} per class; {} {} steps, guidance {})\n",
             q.label_agreement, total, o.per_class, o.solver, o.steps, o.guidance);
  fmt::print(log, "per class: {:.2f}\n", fmt::join(q.per_class, " "));
  fmt::print(log, "Fréchet distance (classifier features): {:.3f} generated vs {} test images; baseline {:.3f} ({} "
                  "training vs {} test images)\n",
             q.frechet, test->size(), q.frechet_baseline, train->size(), test->size());
  return q;
}

}  // namespace kiln::app
