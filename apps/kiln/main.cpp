// kiln: the command-line tool.
//   kiln train fashion-mnist [--model cnn|mlp] [--epochs N] [--batch-size N] [--lr X]
//                            [--threads N] [--out DIR] [--resume [latest|PATH]] ...
//   kiln rl ppo cartpole|pendulum [--seed N] [--total-steps N] [--envs N] [--out DIR] [--resume]
//                                 [--threads N] [--eval-every N] [--eval-episodes N]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>

#include "apps/kiln/fashion_mnist.h"
#include "apps/kiln/rl.h"
#include "kiln/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: train models with the kiln C++ deep-learning framework"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1.0");

  auto* train = app.add_subcommand("train", "train a model");
  train->require_subcommand(1);
  auto* fashion = train->add_subcommand("fashion-mnist", "an image classifier on Fashion-MNIST");
  kiln::app::FashionMnistOptions o;
  fashion->add_option("--model", o.model, "cnn (2 conv + BN + pooling) or mlp (256-128-100)")
      ->check(CLI::IsMember({"cnn", "mlp"}))
      ->capture_default_str();
  fashion->add_option("--epochs", o.epochs, "epochs (default: 10 for cnn, 20 for mlp)")->check(CLI::PositiveNumber);
  fashion->add_option("--batch-size", o.batch_size, "examples per step")->check(CLI::PositiveNumber)->capture_default_str();
  fashion->add_option("--lr", o.lr, "AdamW learning rate (cosine decay to lr/100)")->check(CLI::PositiveNumber)->capture_default_str();
  fashion->add_option("--weight-decay", o.weight_decay, "AdamW weight decay")->check(CLI::NonNegativeNumber)->capture_default_str();
  fashion->add_option("--threads", o.threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  fashion->add_option("--seed", o.seed, "seed of parameters, dropout and data order")->capture_default_str();
  fashion->add_option("--out", o.out, "output folder: metrics.csv, checkpoints/")->capture_default_str();
  fashion->add_option("--data", o.data, "folder of the IDX files (default: $KILN_FASHION_MNIST or /usr/share/datasets/fashion-mnist)");
  fashion->add_option("--resume", o.resume, "continue from a checkpoint: latest (in --out) or a path")
      ->expected(0, 1)
      ->default_str("latest");
  fashion->add_option("--limit", o.limit, "train on the first N images only")->check(CLI::NonNegativeNumber);
  fashion->add_option("--test-limit", o.test_limit, "test on the first N images only")->check(CLI::NonNegativeNumber);

  // kiln rl <algorithm> <env>: one subcommand per algorithm under `rl`, each
  // with its environments as positional choices.
  auto* rl = app.add_subcommand("rl", "train a reinforcement-learning agent");
  rl->require_subcommand(1);
  auto* ppo = rl->add_subcommand("ppo", "PPO with a tuned preset (docs/rl.md)");
  kiln::app::PPOJobOptions ppo_o;
  ppo->add_option("env", ppo_o.env, "cartpole (CartPole-v1) or pendulum (Pendulum-v1)")
      ->required()
      ->check(CLI::IsMember({"cartpole", "pendulum"}));
  ppo->add_option("--seed", ppo_o.seed, "seed of parameters, actions, minibatches and resets")->capture_default_str();
  ppo->add_option("--total-steps", ppo_o.total_steps, "environment steps (default: the preset's)")
      ->check(CLI::PositiveNumber);
  ppo->add_option("--envs", ppo_o.envs, "training environments (default: the preset's)")->check(CLI::PositiveNumber);
  ppo->add_option("--out", ppo_o.out, "output folder: metrics.csv, checkpoints/ (default: runs/ppo-<env>)");
  ppo->add_flag("--resume", ppo_o.resume, "continue from the newest checkpoint in --out");
  ppo->add_option("--threads", ppo_o.threads, "threads (0: all cores)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  ppo->add_option("--eval-every", ppo_o.eval_every, "environment steps between evaluations and checkpoints")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  ppo->add_option("--eval-episodes", ppo_o.eval_episodes, "episodes per deterministic evaluation")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (fashion->parsed()) {
      if (fashion->count("--resume") > 0 && o.resume.empty()) o.resume = "latest";
      kiln::app::train_fashion_mnist(o);
    }
    if (ppo->parsed()) kiln::app::run_ppo(ppo_o);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln: %s\n", e.what());
    return 1;
  }
  return 0;
}
