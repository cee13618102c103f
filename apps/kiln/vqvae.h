// `kiln train vqvae fashion-mnist`: a VQ-VAE (models::VQVAE) on Fashion-MNIST
// images in [0, 1]. Loss = MSE(recon, x) + commitment; the codebook learns by
// its EMA step after each optimizer step. metrics.csv per step: loss,
// recon_mse, perplexity, usage (of the batch's codes), dead_codes (level 0's
// codes under the threshold after the step's re-init), and at each epoch end
// val/loss (the test MSE per pixel), test/usage, test/perplexity over the test split.
// Rotating resumable checkpoints (codebooks and their statistics included);
// after each epoch a PNG grid, recon-epochN.png: 8 test images on the top
// row, their reconstructions below. docs/vq.md.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace kiln::app {

struct VqvaeOptions {
  int64_t codebook_size = 256;   // K
  int64_t dim = 64;              // D, the latent width
  int64_t levels = 1;            // > 1: residual VQ with that many levels
  int64_t epochs = 5;
  int64_t batch_size = 128;
  double lr = 1e-3;              // Adam (AdamW with weight decay 0), constant
  double beta = 0.25;            // commitment weight
  double decay = 0.99;           // codebook EMA decay
  double dead_code_threshold = 1e-3;  // EMA share of the tokens under which a code is re-seeded
  int threads = 0;
  uint64_t seed = 0;             // parameters, codebook init, re-init draws, data order
  std::string out = "runs/vqvae-fashion-mnist";
  std::string data = "";         // folder of the IDX files; "": data::FashionMNIST's default
  std::string resume = "";
  bool overwrite = false;
  std::vector<std::string> overrides = {};
  std::string on_nan = "stop";
  int64_t limit = 0;             // first N training images (0: all)
  int64_t test_limit = 0;        // first N test images (0: all)
  std::ostream* log = nullptr;
  std::optional<bool> tty = {};
};

struct VqvaeResult {
  double test_mse = 0;         // per pixel, images in [0, 1]
  double test_usage = 0;       // share of level 0's codes used on the test split
  double test_perplexity = 0;  // of level 0's codes on the test split
  int64_t epochs = 0;
  double train_seconds = 0;
  std::string checkpoint;
  std::string csv;
  std::string grid;            // the last reconstruction grid written
  int signal = 0;
};

/// Runs the job; kiln::Error on bad options, missing data, a folder holding
/// another run, or a checkpoint that does not match.
VqvaeResult train_vqvae(const VqvaeOptions& options);

}  // namespace kiln::app
