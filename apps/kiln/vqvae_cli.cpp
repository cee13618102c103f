// `kiln train vqvae fashion-mnist`: its flags and the call into apps/kiln/vqvae.h.
#include "apps/kiln/vqvae_cli.h"

#include "apps/kiln/cli_numbers.h"

namespace kiln::app {

void add_vqvae_command(CLI::App* train, VqvaeCommand& cmd) {
  auto* vqvae = train->add_subcommand("vqvae", "a VQ-VAE (vector-quantized autoencoder) on an image data set");
  vqvae->require_subcommand(1);
  auto* fm = vqvae->add_subcommand("fashion-mnist", "Fashion-MNIST images in [0, 1] (docs/vq.md)");
  cmd.command = fm;
  VqvaeOptions& o = cmd.options;
  cmd.flags = add_run_flags(fm, "kiln train vqvae fashion-mnist", o,
                            {.seed = "seed of parameters, codebooks, code re-init and data order"});
  add_integer(fm, "--codebook-size", o.codebook_size, "codes per codebook (K)", 1, 65536);
  add_integer(fm, "--dim", o.dim, "latent and code width (D)", 1, 4096);
  add_integer(fm, "--levels", o.levels, "1: one VectorQuantizer; more: residual VQ with that many levels", 1, 64);
  add_integer(fm, "--epochs", o.epochs, "epochs", 1, 1e6);
  add_integer(fm, "--batch-size", o.batch_size, "images per step (at most the training images)", 1, kMaxBatch);
  add_real(fm, "--lr", o.lr, "Adam learning rate (constant)", {.lo = 0, .lo_open = true});
  add_real(fm, "--beta", o.beta, "commitment weight", {.lo = 0});
  add_real(fm, "--decay", o.decay, "codebook EMA decay", {.lo = 0, .hi = 1, .hi_open = true});
  add_real(fm, "--dead-code-threshold", o.dead_code_threshold,
           "re-seed a code whose EMA share of the tokens falls below this (0: never)", {.lo = 0, .hi = 1, .hi_open = true});
  fm->add_option("--data", o.data, "folder of the IDX files (default: $KILN_FASHION_MNIST or /usr/share/datasets/fashion-mnist)");
  fm->add_option("--on-nan", o.on_nan, "a NaN or infinite loss: stop the run, or skip the step")
      ->check(CLI::IsMember({"stop", "skip"}))
      ->capture_default_str();
  add_integer(fm, "--limit", o.limit, "train on the first N images only (0: all)", 0, kMaxBatch);
  add_integer(fm, "--test-limit", o.test_limit, "test on the first N images only (0: all)", 0, kMaxBatch);
}

int run_vqvae_command(VqvaeCommand& cmd) {
  finish_run_flags(cmd.flags, cmd.options);
  const int signal = train_vqvae(cmd.options).signal;
  return signal == 0 ? 0 : 128 + signal;
}

}  // namespace kiln::app
