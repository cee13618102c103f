// kiln: the command-line tool.
//   kiln train fashion-mnist [--model cnn|mlp] [--epochs N] [--batch-size N] [--lr X]
//                            [--threads N] [--out DIR] [--resume [latest|PATH]] ...
//   kiln train lm --data FILE [--tokenizer char|byte|bpe] [--iters N] [--lr X] ... (apps/kiln/lm.h)
//   kiln generate --checkpoint PATH --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K]
//                 [--top-p P] [--seed S] (apps/kiln/generate.h)
//   kiln rl dqn cartpole | kiln rl sac pendulum [--seed N] [--total-steps N] [--out DIR] ...
//   kiln rl ppo cartpole|pendulum [--seed N] [--total-steps N] [--envs N] [--out DIR] [--resume]
//                                 [--threads N] [--eval-every N] [--eval-episodes N]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>

#include "apps/kiln/fashion_mnist.h"
#include "apps/kiln/generate.h"
#include "apps/kiln/lm.h"
#include "apps/kiln/rl.h"
#include "apps/kiln/rl_offpolicy.h"
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

  auto* lm = train->add_subcommand("lm", "a GPT language model on a text file (nanoGPT's shakespeare_char recipe)");
  kiln::app::LmOptions l;
  lm->add_option("--data", l.data, "the text file; the last 10% of its tokens validate")->required();
  lm->add_option("--tokenizer", l.tokenizer, "char, byte or bpe (trained on the file)")
      ->check(CLI::IsMember({"char", "byte", "bpe"}))
      ->capture_default_str();
  lm->add_option("--vocab-size", l.vocab_size, "bpe: vocabulary size (256 bytes + merges)")->capture_default_str();
  lm->add_option("--iters", l.iters, "optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  lm->add_option("--batch-size", l.batch_size, "sequences per step")->check(CLI::PositiveNumber)->capture_default_str();
  lm->add_option("--block-size", l.block_size, "context length T")->check(CLI::PositiveNumber)->capture_default_str();
  lm->add_option("--n-layer", l.n_layer, "Transformer blocks")->check(CLI::PositiveNumber)->capture_default_str();
  lm->add_option("--n-head", l.n_head, "attention heads")->check(CLI::PositiveNumber)->capture_default_str();
  lm->add_option("--n-embd", l.n_embd, "width")->check(CLI::PositiveNumber)->capture_default_str();
  lm->add_option("--dropout", l.dropout, "dropout rate")->check(CLI::Range(0.0, 0.999))->capture_default_str();
  lm->add_option("--lr", l.lr, "AdamW peak learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  lm->add_option("--min-lr", l.min_lr, "learning rate at the end of the cosine")->check(CLI::NonNegativeNumber)->capture_default_str();
  lm->add_option("--warmup", l.warmup, "linear warmup steps")->check(CLI::NonNegativeNumber)->capture_default_str();
  lm->add_option("--weight-decay", l.weight_decay, "AdamW weight decay (2-D tensors only)")->check(CLI::NonNegativeNumber)->capture_default_str();
  lm->add_option("--beta1", l.beta1, "AdamW beta1")->capture_default_str();
  lm->add_option("--beta2", l.beta2, "AdamW beta2")->capture_default_str();
  lm->add_option("--grad-clip", l.grad_clip, "max gradient norm (0: none)")->check(CLI::NonNegativeNumber)->capture_default_str();
  lm->add_option("--eval-interval", l.eval_interval, "estimate the losses (and save) every N steps")->check(CLI::PositiveNumber)->capture_default_str();
  lm->add_option("--eval-iters", l.eval_iters, "batches per loss estimate")->check(CLI::PositiveNumber)->capture_default_str();
  lm->add_option("--seed", l.seed, "seed of parameters, dropout and batches")->capture_default_str();
  lm->add_option("--threads", l.threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);
  lm->add_option("--out", l.out, "output folder: metrics.csv, checkpoints/")->capture_default_str();
  lm->add_option("--resume", l.resume, "continue from a checkpoint: latest (in --out) or a path")
      ->expected(0, 1)
      ->default_str("latest");
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

  // DQN (CartPole) and SAC (Pendulum) with CleanRL's defaults (docs/rl_offpolicy.md).
  kiln::app::OffPolicyJobOptions dqn_o{.algo = "dqn"}, sac_o{.algo = "sac"};
  CLI::App* offpolicy[2] = {rl->add_subcommand("dqn", "DQN on CartPole (docs/rl_offpolicy.md)"),
                            rl->add_subcommand("sac", "SAC with fixed alpha on Pendulum (docs/rl_offpolicy.md)")};
  for (auto [sub, op] : {std::pair{offpolicy[0], &dqn_o}, std::pair{offpolicy[1], &sac_o}}) {
    const std::string env = op->algo == "dqn" ? "cartpole" : "pendulum";
    sub->add_option("env", op->env, env)->required()->check(CLI::IsMember({env}));
    sub->add_option("--seed", op->seed, "seed of parameters, exploration, replay sampling and resets")
        ->capture_default_str();
    sub->add_option("--total-steps", op->total_steps, "environment steps (default: 200k for dqn, 30k for sac)")
        ->check(CLI::PositiveNumber);
    sub->add_option("--out", op->out, "output folder: metrics.csv, checkpoints/ (default: runs/<algo>-<env>)");
    sub->add_option("--threads", op->threads, "threads (0: all cores)")->check(CLI::NonNegativeNumber)->capture_default_str();
    sub->add_option("--eval-every", op->eval_every, "environment steps between evaluations and checkpoints")
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--eval-episodes", op->eval_episodes, "episodes per deterministic evaluation")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
  }

  auto* gen = app.add_subcommand("generate", "sample text from a `kiln train lm` checkpoint, streamed");
  kiln::app::GenerateTextOptions g;
  gen->add_option("--checkpoint", g.checkpoint, "a checkpoint file, or a run folder (its newest)")->required();
  gen->add_option("--prompt", g.prompt, "the text to continue")->capture_default_str();
  gen->add_option("--max-new-tokens", g.max_new_tokens, "tokens to sample")->check(CLI::NonNegativeNumber)->capture_default_str();
  gen->add_option("--temperature", g.temperature, "logits / T; 0: greedy")->check(CLI::NonNegativeNumber)->capture_default_str();
  gen->add_option("--top-k", g.top_k, "sample among the k likeliest (0: all)")->check(CLI::NonNegativeNumber)->capture_default_str();
  gen->add_option("--top-p", g.top_p, "nucleus: the likeliest tokens up to this mass")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  gen->add_option("--seed", g.seed, "seed of the draws")->capture_default_str();
  gen->add_option("--threads", g.threads, "threads (default: all cores)")->check(CLI::NonNegativeNumber);

  CLI11_PARSE(app, argc, argv);
  try {
    if (fashion->parsed()) {
      if (fashion->count("--resume") > 0 && o.resume.empty()) o.resume = "latest";
      kiln::app::train_fashion_mnist(o);
    }
    if (lm->parsed()) {
      if (lm->count("--resume") > 0 && l.resume.empty()) l.resume = "latest";
      kiln::app::train_lm(l);
    }
    if (ppo->parsed()) kiln::app::run_ppo(ppo_o);
    if (offpolicy[0]->parsed()) kiln::app::run_offpolicy(dqn_o);
    if (offpolicy[1]->parsed()) kiln::app::run_offpolicy(sac_o);
    if (gen->parsed()) kiln::app::generate_text(g);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln: %s\n", e.what());
    return 1;
  }
  return 0;
}
