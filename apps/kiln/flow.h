// Flow matching jobs (issue 28, docs/flow_matching.md):
//
//   kiln train flow fashion-mnist [--epochs N] [--hidden 128] [--depth 6] [--heads 4] [--patch 4] ...
//       a class-conditional DiT trained by flow matching; RUN/metrics.csv,
//       RUN/checkpoints/, and after each epoch RUN/samples/epoch_NNN.png
//       (10 samples per class, one class per row).
//   kiln sample flow --checkpoint RUN_OR_FILE [--class 3] [--n 64] [--out grid.png] [--steps 50] [--guidance W]
//   kiln eval flow --checkpoint RUN_OR_FILE --classifier FASHION_MNIST_RUN [--per-class 100]
//       label agreement of kiln's Fashion-MNIST CNN on generated images, and
//       the Fréchet distance of its penultimate features against test images
//       beside the real-vs-real baseline (training images vs test images).
//
// Images are scaled to [-1, 1] for the model (pixels / 255 * 2 - 1).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/models/dit.h"

namespace kiln::app {

struct FlowTrainOptions {
  std::string dataset = "fashion-mnist";
  int64_t epochs = 5;
  int64_t batch_size = 128;
  double lr = 1e-3;           // AdamW peak; cosine to lr / 10
  double weight_decay = 0.0;  // DiT trains without weight decay
  double grad_clip = 1.0;     // max gradient norm; 0: none
  int64_t hidden = 128, depth = 6, heads = 4, patch = 4;
  double class_dropout = 0.1;         // CFG's label dropout
  std::string pos_embed = "sincos";   // or "learned"
  std::string time_sampling = "uniform";  // or "logit-normal"
  int64_t moe_experts = 0;            // DiTConfig::moe_experts: > 0 makes every block's FFN an nn::MoE
  int64_t moe_top_k = 2;              // DiTConfig::moe_top_k (aux-loss-free bias balancing)
  bool bf16 = false;                  // bf16 compute (f32 master weights; docs/mixed_precision.md)
  // The per-epoch sample grid: Euler / Heun, steps, guidance; false: no grids.
  bool grids = true;
  int64_t sample_steps = 50;
  std::string solver = "euler";
  double guidance = 1.0;
  int threads = 0;
  uint64_t seed = 0;  // parameters, noise, times, label dropout, data order
  std::string out = "runs/flow-fashion-mnist";
  std::string data = "";
  std::string resume = "";
  bool overwrite = false;
  std::vector<std::string> overrides = {};
  std::string on_nan = "stop";
  int64_t limit = 0;  // the first `limit` training images only (0: all 60000)
  std::ostream* log = nullptr;
  std::optional<bool> tty = {};
};

struct FlowTrainResult {
  double loss = 0;        // the last epoch's mean flow-matching loss
  int64_t epochs = 0;
  double train_seconds = 0;
  std::string checkpoint;
  std::string csv;
  std::string grid;       // the last epoch's sample grid ("" without grids)
  int signal = 0;
};

FlowTrainResult train_flow(const FlowTrainOptions& options);

/// A DiT rebuilt from a `kiln train flow` checkpoint (or run folder: its
/// newest), in eval mode; kiln::Error naming the file otherwise.
struct LoadedFlow {
  std::shared_ptr<models::DiT> model;
  std::string file;
  int64_t steps = 0;  // optimizer steps it was trained for
};
LoadedFlow load_flow(const std::string& path);

struct FlowSampleJobOptions {
  std::string checkpoint;
  int64_t class_id = -1;  // -1: the classes in turn (0, 1, ..., 9, 0, ...)
  int64_t n = 64;
  std::string out = "grid.png";
  int64_t nrow = 8;
  int64_t steps = 50;
  std::string solver = "euler";
  double guidance = 1.0;
  uint64_t seed = 0;
  int threads = 0;
  std::ostream* log = nullptr;
};

/// Samples n images and writes them as one PNG grid; returns the images in [0, 1].
Tensor sample_flow_grid(const FlowSampleJobOptions& options);

struct FlowEvalOptions {
  std::string checkpoint;  // `kiln train flow`
  std::string classifier;  // `kiln train fashion-mnist` (--model cnn)
  int64_t per_class = 100;
  int64_t steps = 50;
  std::string solver = "euler";
  double guidance = 1.0;
  uint64_t seed = 0;
  int64_t real = 1000;  // test images (and training images for the baseline)
  std::string data = "";
  int threads = 0;
  std::ostream* log = nullptr;
};

struct FlowQuality {
  int64_t samples = 0;
  double label_agreement = 0;           // fraction classified as the class asked for
  std::vector<double> per_class;        // the same per class
  double frechet = 0;                   // generated vs test features
  double frechet_baseline = 0;          // training vs test images (real vs real)
};

FlowQuality evaluate_flow(const FlowEvalOptions& options);

/// The Fréchet distance between Gaussians fitted to feature rows a [Na, F]
/// and b [Nb, F]: |mu_a - mu_b|^2 + tr(S_a + S_b - 2 (S_a^1/2 S_b S_a^1/2)^1/2),
/// square roots by symmetric eigen-decomposition (Jacobi), in f64.
double frechet_distance(const Tensor& a, const Tensor& b);

}  // namespace kiln::app
