// The command line of the flow matching jobs (apps/kiln/flow.h), registered by
// main.cpp in one call: `kiln train flow fashion-mnist`, `kiln sample flow`,
// `kiln eval flow`. Header-only: only the kiln tool (CLI11) includes it.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>

#include "apps/kiln/cli_numbers.h"
#include "apps/kiln/flow.h"
#include "apps/kiln/run_flags.h"

namespace kiln::app {

struct FlowCommands {
  CLI::App* train = nullptr;
  CLI::App* sample = nullptr;
  CLI::App* eval = nullptr;
  FlowTrainOptions t;
  FlowSampleJobOptions s;
  FlowEvalOptions e;
  RunFlags flags;
  bool no_grids = false;
};

/// Adds `flow` under `kiln train` and `kiln sample flow`, `kiln eval flow` under app.
inline std::unique_ptr<FlowCommands> add_flow_commands(CLI::App& app, CLI::App* train) {
  auto c = std::make_unique<FlowCommands>();
  constexpr RealRange kPos{.lo = 0, .lo_open = true};
  constexpr RealRange kNonNeg{.lo = 0};
  constexpr RealRange kAny{};
  // kiln train flow fashion-mnist
  CLI::App* tf = c->train = train->add_subcommand("flow", "a class-conditional DiT by flow matching (docs/flow_matching.md)");
  FlowTrainOptions& t = c->t;
  c->flags = add_run_flags(tf, "kiln train flow", t, {.seed = "seed of parameters, noise, times, label dropout and data order"});
  tf->add_option("dataset", t.dataset, "fashion-mnist")->required()->check(CLI::IsMember({"fashion-mnist"}));
  add_integer(tf, "--epochs", t.epochs, "epochs", 1, 1e6);
  add_integer(tf, "--batch-size", t.batch_size, "images per step", 1, kMaxBatch);
  add_real(tf, "--lr", t.lr, "AdamW peak learning rate (cosine decay to lr/10)", kPos);
  add_real(tf, "--weight-decay", t.weight_decay, "AdamW weight decay", kNonNeg);
  add_real(tf, "--grad-clip", t.grad_clip, "max gradient norm (0: none)", kNonNeg);
  add_integer(tf, "--hidden", t.hidden, "DiT width D", 4, 1 << 16);
  add_integer(tf, "--depth", t.depth, "DiT blocks", 1, 1024);
  add_integer(tf, "--heads", t.heads, "attention heads", 1, 4096);
  add_integer(tf, "--patch", t.patch, "patch size (divides 28)", 1, 28);
  add_real(tf, "--class-dropout", t.class_dropout, "label dropout for classifier-free guidance",
           {.lo = 0, .hi = 1, .hi_open = true});
  tf->add_option("--pos-embed", t.pos_embed, "sincos (fixed) or learned")
      ->check(CLI::IsMember({"sincos", "learned"}))
      ->capture_default_str();
  tf->add_option("--time-sampling", t.time_sampling, "t during training: uniform or logit-normal")
      ->check(CLI::IsMember({"uniform", "logit-normal"}))
      ->capture_default_str();
  add_integer(tf, "--moe-experts", t.moe_experts, "mixture-of-experts FFN experts (0: dense; docs/moe.md)", 0, 1024);
  add_integer(tf, "--moe-top-k", t.moe_top_k, "experts each patch token goes to", 1, 1024);
  tf->add_flag("--bf16", t.bf16, "compute in bf16 (f32 master weights and optimizer)");
  add_integer(tf, "--sample-steps", t.sample_steps, "ODE steps of the per-epoch sample grid", 1, 1e6);
  tf->add_option("--solver", t.solver, "euler or heun")->check(CLI::IsMember({"euler", "heun"}))->capture_default_str();
  add_real(tf, "--guidance", t.guidance, "classifier-free guidance scale of the grids (1: none)", kAny);
  tf->add_flag("--no-grids", c->no_grids, "no per-epoch sample grid");
  tf->add_option("--data", t.data, "folder of the IDX files (default: $KILN_FASHION_MNIST or /usr/share/datasets/fashion-mnist)");
  tf->add_option("--on-nan", t.on_nan, "a NaN or infinite loss: stop the run, or skip the step")
      ->check(CLI::IsMember({"stop", "skip"}))
      ->capture_default_str();
  add_integer(tf, "--limit", t.limit, "train on the first N images only (0: all)", 0, kMaxBatch);

  // kiln sample flow
  CLI::App* sample = app.add_subcommand("sample", "sample from a generative model");
  sample->require_subcommand(1);
  CLI::App* sf = c->sample = sample->add_subcommand("flow", "images from a `kiln train flow` checkpoint, as a PNG grid");
  FlowSampleJobOptions& s = c->s;
  sf->add_option("--checkpoint", s.checkpoint, "a checkpoint file, or a run folder (its newest)")->required();
  add_integer(sf, "--class", s.class_id, "class of every sample (-1: the classes in turn)", -1, 1 << 20);
  add_integer(sf, "--n", s.n, "samples", 1, 100000);
  sf->add_option("--out", s.out, "the PNG file")->capture_default_str();
  add_integer(sf, "--nrow", s.nrow, "images per row of the grid", 1, 100000);
  add_integer(sf, "--steps", s.steps, "ODE steps", 1, 1e6);
  sf->add_option("--solver", s.solver, "euler or heun")->check(CLI::IsMember({"euler", "heun"}))->capture_default_str();
  add_real(sf, "--guidance", s.guidance, "classifier-free guidance scale (1: none)", kAny);
  add_integer(sf, "--seed", s.seed, "seed of the noise", 0, kMaxSeed);
  add_integer(sf, "--threads", s.threads, "threads (default: all cores)", 1, kMaxThreads, false);

  // kiln eval flow
  CLI::App* evalc = app.add_subcommand("eval", "measure a trained model");
  evalc->require_subcommand(1);
  CLI::App* ef = c->eval = evalc->add_subcommand(
      "flow", "label agreement and Fréchet distance of a `kiln train flow` model under a Fashion-MNIST CNN");
  FlowEvalOptions& e = c->e;
  ef->add_option("--checkpoint", e.checkpoint, "a `kiln train flow` checkpoint or run folder")->required();
  ef->add_option("--classifier", e.classifier, "a `kiln train fashion-mnist --model cnn` checkpoint or run folder")
      ->required();
  add_integer(ef, "--per-class", e.per_class, "samples per class", 1, 100000);
  add_integer(ef, "--steps", e.steps, "ODE steps", 1, 1e6);
  ef->add_option("--solver", e.solver, "euler or heun")->check(CLI::IsMember({"euler", "heun"}))->capture_default_str();
  add_real(ef, "--guidance", e.guidance, "classifier-free guidance scale (1: none)", kAny);
  add_integer(ef, "--seed", e.seed, "seed of the noise", 0, kMaxSeed);
  add_integer(ef, "--real", e.real, "test images (and training images for the baseline)", 2, 60000);
  ef->add_option("--data", e.data, "folder of the IDX files");
  add_integer(ef, "--threads", e.threads, "threads (default: all cores)", 1, kMaxThreads, false);
  return c;
}

/// Runs the flow command that was parsed: its exit status, or nullopt when none was.
inline std::optional<int> run_flow_commands(FlowCommands& c) {
  if (c.train->parsed()) {
    finish_run_flags(c.flags, c.t);
    c.t.grids = !c.no_grids;
    const int signal = train_flow(c.t).signal;
    return signal == 0 ? 0 : 128 + signal;
  }
  if (c.sample->parsed()) {
    clamp_threads(c.s.threads);
    sample_flow_grid(c.s);
    return 0;
  }
  if (c.eval->parsed()) {
    clamp_threads(c.e.threads);
    evaluate_flow(c.e);
    return 0;
  }
  return std::nullopt;
}

}  // namespace kiln::app
