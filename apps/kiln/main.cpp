// kiln: the command-line tool.
//   kiln train fashion-mnist [--model cnn|mlp] [--epochs N] [--batch-size N] [--lr X]
//                            [--threads N] [--out DIR] [--resume [latest|PATH]] [--overwrite] ...
//   kiln train vqvae fashion-mnist [--codebook-size K] [--levels L] [--epochs N] ... (apps/kiln/vqvae.h)
//   kiln train lm --data FILE [--tokenizer char|byte|bpe] [--iters N] [--lr X] ... (apps/kiln/lm.h)
//   kiln train flow fashion-mnist ... | kiln sample flow ... | kiln eval flow ... (apps/kiln/flow.h)
//   kiln generate --checkpoint PATH --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K]
//                 [--top-p P] [--seed S] (apps/kiln/generate.h)
//   kiln rl ppo cartpole|pendulum [--total-steps N] [--envs N] [--eval-every N] [--eval-episodes N] ...
//   kiln rl dqn cartpole | kiln rl sac pendulum [--total-steps N] [--eval-every N] [--eval-episodes N] ...
//   kiln control RUN_DIR status|pause|resume|stop|checkpoint|evaluate|set NAME=VALUE
//   kiln inspect FILE | kiln convert IN OUT [--quantize q8_0|q4_0] (apps/kiln/model_files.h)
//   kiln eval lm --checkpoint PATH --data FILE [--batches N] [--batch-size B] [--seed S] (apps/kiln/eval_lm.h)
//
// Every job (train and rl) takes the same run flags (apps/kiln/run_flags.h):
// --out DIR --seed N --threads N --resume [latest|PATH] --overwrite
// --override NAME[,NAME]; while it runs, `kiln control RUN_DIR ...` steers it
// over RUN_DIR/control.sock and exits 0 when the command was applied, 1 when
// it was rejected (or no job runs there), 2 on a usage error.
//
// Every failure ends as one line, `kiln: error: ...`, and a non-zero status:
// 2 for a command line CLI11 or a numeric flag refuses, 1 for anything a job
// throws (kiln::Error, std::bad_alloc, a filesystem error, anything else),
// 128 + N for a run stopped by signal N (SIGINT 130, SIGTERM 143) after its
// checkpoint. docs/reliability.md.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>

#include "apps/kiln/cli_numbers.h"
#include "apps/kiln/control_socket.h"
#include "apps/kiln/distributed_job.h"
#include "apps/kiln/eval_lm.h"
#include "apps/kiln/fashion_mnist.h"
#include "apps/kiln/vqvae_cli.h"
#include "apps/kiln/flow_cli.h"
#include "apps/kiln/generate.h"
#include "apps/kiln/lm.h"
#include "apps/kiln/model_files.h"
#include "apps/kiln/rl.h"
#include "apps/kiln/rl_offpolicy.h"
#include "apps/kiln/run_flags.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"

namespace {

using kiln::app::add_integer;
using kiln::app::add_real;
using kiln::app::add_run_flags;
using kiln::app::clamp_threads;
using kiln::app::finish_run_flags;
using kiln::app::RunFlags;
using kiln::app::kMaxBatch;
using kiln::app::kMaxCount;
using kiln::app::kMaxSeed;
using kiln::app::kMaxThreads;
using kiln::app::RealRange;

constexpr RealRange kPositive{.lo = 0, .lo_open = true};
constexpr RealRange kNonNegative{.lo = 0};

// The one line every failure ends as.
int report(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "kiln: error: out of memory (std::bad_alloc): the model, batch or data is too large for this "
                 "machine\n");
  } catch (const std::filesystem::filesystem_error& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "kiln: error: unknown exception\n");
  }
  kiln::app::abort_other_ranks();  // under mpirun: every rank stops, not only this one
  return 1;
}

// An exception escaping another thread (a data loader's prefetch, say) would
// otherwise abort with rc 134 and a bare C++ message.
[[noreturn]] void on_terminate() {
  if (std::exception_ptr e = std::current_exception())
    report(e);
  else
    std::fprintf(stderr, "kiln: error: terminated\n");
  std::_Exit(1);
}

int exit_status(int signal) { return signal == 0 ? 0 : 128 + signal; }

int run(int argc, char** argv) {
  CLI::App app{"kiln: train models with the kiln C++ deep-learning framework"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1.0");

  auto* train = app.add_subcommand("train", "train a model");
  train->require_subcommand(1);
  auto* fashion = train->add_subcommand("fashion-mnist", "an image classifier on Fashion-MNIST");
  kiln::app::FashionMnistOptions o;
  RunFlags o_flags =
      add_run_flags(fashion, "kiln train fashion-mnist", o, {.seed = "seed of parameters, dropout and data order"});
  fashion->add_option("--model", o.model, "cnn (2 conv + BN + pooling) or mlp (256-128-100)")
      ->check(CLI::IsMember({"cnn", "mlp"}))
      ->capture_default_str();
  add_integer(fashion, "--epochs", o.epochs, "epochs (default: 10 for cnn, 20 for mlp)", 1, 1e6, false);
  add_integer(fashion, "--batch-size", o.batch_size, "examples per step (at most the training images)", 1, kMaxBatch);
  add_real(fashion, "--lr", o.lr, "AdamW learning rate (cosine decay to lr/100)", kPositive);
  add_real(fashion, "--weight-decay", o.weight_decay, "AdamW weight decay", kNonNegative);
  fashion->add_option("--data", o.data, "folder of the IDX files (default: $KILN_FASHION_MNIST or /usr/share/datasets/fashion-mnist)");
  fashion->add_option("--on-nan", o.on_nan, "a NaN or infinite loss: stop the run, or skip the step")
      ->check(CLI::IsMember({"stop", "skip"}))
      ->capture_default_str();
  add_integer(fashion, "--limit", o.limit, "train on the first N images only (0: all)", 0, kMaxBatch);
  add_integer(fashion, "--test-limit", o.test_limit, "test on the first N images only (0: all)", 0, kMaxBatch);
  fashion->add_flag("--compile", o.compile, "record the training step once and replay it (same results; docs/compile.md)");
  fashion->add_option("--memory-budget", o.memory_budget,
                      "pick the largest batch whose peak memory fits SIZE (256M, 1G; auto: the cgroup limit and "
                      "MemAvailable) from three probe steps, instead of --batch-size");
  kiln::app::VqvaeCommand vqvae;  // kiln train vqvae fashion-mnist (apps/kiln/vqvae_cli.h)
  kiln::app::add_vqvae_command(train, vqvae);

  auto* lm = train->add_subcommand("lm", "a GPT language model on a text file (nanoGPT's shakespeare_char recipe)");
  kiln::app::LmOptions l;
  RunFlags l_flags = add_run_flags(lm, "kiln train lm", l, {.seed = "seed of parameters, dropout and batches"});
  lm->add_option("--data", l.data, "the text file; the last 10% of its tokens validate")->required();
  lm->add_option("--tokenizer", l.tokenizer, "char, byte or bpe (trained on the file)")
      ->check(CLI::IsMember({"char", "byte", "bpe"}))
      ->capture_default_str();
  add_integer(lm, "--vocab-size", l.vocab_size, "bpe: vocabulary size (256 bytes + merges)", 256, 1 << 20);
  add_integer(lm, "--iters", l.iters, "optimizer steps", 1, 1e9);
  add_integer(lm, "--batch-size", l.batch_size, "sequences per step", 1, kMaxBatch);
  lm->add_option("--memory-budget", l.memory_budget,
                 "pick the largest batch whose peak memory fits SIZE (256M, 1G; auto: the cgroup limit and "
                 "MemAvailable; per process under mpirun) from three probe steps, instead of --batch-size");
  add_integer(lm, "--block-size", l.block_size, "context length T", 1, 1 << 20);
  add_integer(lm, "--n-layer", l.n_layer, "Transformer blocks", 1, 1024);
  add_integer(lm, "--n-head", l.n_head, "attention heads", 1, 4096);
  add_integer(lm, "--n-embd", l.n_embd, "width", 1, 1 << 20);
  add_real(lm, "--dropout", l.dropout, "dropout rate", {.lo = 0, .hi = 1, .hi_open = true});
  lm->add_option("--arch", l.arch, "gpt, or mamba3 (a Mamba-3 state-space model, docs/ssm.md)")
      ->check(CLI::IsMember({"gpt", "mamba3"}))
      ->capture_default_str();
  add_integer(lm, "--d-state", l.d_state, "mamba3: state size per head", 1, 1 << 12);
  add_integer(lm, "--headdim", l.headdim, "mamba3: head dimension", 1, 1 << 12);
  add_integer(lm, "--moe-experts", l.moe_experts, "experts per block (0: a dense MLP; docs/moe.md)", 0, 4096);
  add_integer(lm, "--moe-top-k", l.moe_top_k, "experts each token goes to", 1, 4096);
  add_integer(lm, "--moe-expert-width", l.moe_expert_width, "each expert's hidden width (0: 4 n_embd / top_k)", 0,
              1 << 20);
  lm->add_option("--moe-balance", l.moe_balance, "load balancing: aux (Switch loss), bias (aux-loss-free) or none")
      ->check(CLI::IsMember({"none", "aux", "bias"}))
      ->capture_default_str();
  add_real(lm, "--moe-aux-coef", l.moe_aux_coef, "alpha of the Switch aux loss (--moe-balance aux)", kNonNegative);
  add_real(lm, "--moe-z-coef", l.moe_z_coef, "beta of the router z-loss (0: off)", kNonNegative);
  add_real(lm, "--moe-bias-rate", l.moe_bias_rate, "gamma of the bias update (--moe-balance bias)", kNonNegative);
  add_real(lm, "--lr", l.lr, "AdamW peak learning rate", kPositive);
  add_real(lm, "--min-lr", l.min_lr, "learning rate at the end of the cosine", kNonNegative);
  add_integer(lm, "--warmup", l.warmup, "linear warmup steps", 0, 1e9);
  add_real(lm, "--weight-decay", l.weight_decay, "AdamW weight decay (2-D tensors only)", kNonNegative);
  add_real(lm, "--beta1", l.beta1, "AdamW beta1", {.lo = 0, .hi = 1, .hi_open = true});
  add_real(lm, "--beta2", l.beta2, "AdamW beta2", {.lo = 0, .hi = 1, .hi_open = true});
  add_real(lm, "--grad-clip", l.grad_clip, "max gradient norm (0: none)", kNonNegative);
  add_integer(lm, "--eval-interval", l.eval_interval, "estimate the losses (and save) every N steps", 1, 1e9);
  add_integer(lm, "--eval-iters", l.eval_iters, "batches per loss estimate", 1, 1e9);
  lm->add_flag("--compile", l.compile, "record the training step once and replay it (same results; docs/compile.md)");
  lm->add_option("--on-nan", l.on_nan, "a NaN or infinite loss: stop the run, or skip the step")
      ->check(CLI::IsMember({"stop", "skip"}))
      ->capture_default_str();

  // kiln train flow fashion-mnist, kiln sample flow, kiln eval flow (apps/kiln/flow_cli.h).
  auto flow = kiln::app::add_flow_commands(app, train);

  // kiln rl <algorithm> <env>: one subcommand per algorithm under `rl`, each
  // with its environments as positional choices.
  auto* rl = app.add_subcommand("rl", "train a reinforcement-learning agent");
  rl->require_subcommand(1);
  auto* ppo = rl->add_subcommand("ppo", "PPO with a tuned preset (docs/rl.md)");
  kiln::app::PPOJobOptions ppo_o;
  RunFlags ppo_flags = add_run_flags(ppo, "kiln rl ppo", ppo_o,
                                     {.seed = "seed of parameters, actions, minibatches and resets",
                                      .out = "(default: runs/ppo-<env>)",
                                      .threads_all = false});
  ppo->add_option("env", ppo_o.env, "cartpole (CartPole-v1) or pendulum (Pendulum-v1)")
      ->required()
      ->check(CLI::IsMember({"cartpole", "pendulum"}));
  add_integer(ppo, "--total-steps", ppo_o.total_steps, "environment steps (default: the preset's)", 1, kMaxCount,
              false);
  add_integer(ppo, "--envs", ppo_o.envs, "training environments (default: the preset's)", 1, 1 << 16, false);
  add_integer(ppo, "--eval-every", ppo_o.eval_every, "environment steps between evaluations and checkpoints (0: only at the end)",
              0, kMaxCount);
  add_integer(ppo, "--eval-episodes", ppo_o.eval_episodes, "episodes per deterministic evaluation", 1, 1e6);
  ppo->add_flag("--compile", ppo_o.compile, "record the minibatch update once and replay it (same results; docs/compile.md)");

  // DQN (CartPole) and SAC (Pendulum) with CleanRL's defaults (docs/rl_offpolicy.md).
  kiln::app::OffPolicyJobOptions dqn_o{.algo = "dqn"}, sac_o{.algo = "sac"};
  CLI::App* offpolicy[2] = {rl->add_subcommand("dqn", "DQN on CartPole (docs/rl_offpolicy.md)"),
                            rl->add_subcommand("sac", "SAC with fixed alpha on Pendulum (docs/rl_offpolicy.md)")};
  RunFlags offpolicy_flags[2];
  for (int i = 0; i < 2; ++i) {
    CLI::App* sub = offpolicy[i];
    kiln::app::OffPolicyJobOptions* op = i == 0 ? &dqn_o : &sac_o;
    const std::string env = op->algo == "dqn" ? "cartpole" : "pendulum";
    sub->add_option("env", op->env, env)->required()->check(CLI::IsMember({env}));
    offpolicy_flags[i] = add_run_flags(sub, "kiln rl " + op->algo, *op,
                                       {.seed = "seed of parameters, exploration, replay sampling and resets",
                                        .out = "(default: runs/<algo>-<env>)",
                                        .threads_all = false});
    add_integer(sub, "--total-steps", op->total_steps, "environment steps (default: 200k for dqn, 30k for sac)", 1,
                kMaxCount, false);
    add_integer(sub, "--eval-every", op->eval_every, "environment steps between evaluations and checkpoints", 1,
                kMaxCount, false);
    add_integer(sub, "--eval-episodes", op->eval_episodes, "episodes per deterministic evaluation", 1, 1e6);
    sub->add_flag("--compile", op->compile, "record the gradient steps once and replay them (same results; docs/compile.md)");
  }

  // kiln control RUN_DIR COMMAND...: live control of a running job (docs/live_control.md).
  auto* control = app.add_subcommand("control", "steer the job running in RUN_DIR over RUN_DIR/control.sock");
  std::string control_dir;
  std::vector<std::string> control_words;
  control->add_option("run_dir", control_dir, "the job's --out folder")->required();
  control->add_option("command", control_words,
                      "status | pause | resume | stop | checkpoint | evaluate | set NAME=VALUE (e.g. set lr=0.0001)")
      ->required();

  auto* gen = app.add_subcommand("generate", "sample text from a `kiln train lm` checkpoint, streamed");
  kiln::app::GenerateTextOptions g;
  gen->add_option("--checkpoint", g.checkpoint, "a checkpoint file, a run folder (its newest), or a GGUF model of `kiln convert`")->required();
  gen->add_option("--prompt", g.prompt, "the text to continue")->capture_default_str();
  add_integer(gen, "--max-new-tokens", g.max_new_tokens, "tokens to sample", 0, 1e9);
  add_real(gen, "--temperature", g.temperature, "logits / T; 0: greedy", kNonNegative);
  add_integer(gen, "--top-k", g.top_k, "sample among the k likeliest (0: all)", 0, kMaxBatch);
  add_real(gen, "--top-p", g.top_p, "nucleus: the likeliest tokens up to this mass", {.lo = 0, .hi = 1, .lo_open = true});
  add_integer(gen, "--seed", g.seed, "seed of the draws", 0, kMaxSeed);
  add_integer(gen, "--threads", g.threads, "threads (default: all cores)", 1, kMaxThreads, false);

  // Model files (docs/model_files.md).
  auto* inspect = app.add_subcommand("inspect", "show a model file: format, metadata, tensors (safetensors, GGUF, manifest, ONNX)");
  kiln::app::InspectOptions inspect_o;
  inspect->add_option("file", inspect_o.path, "the file")->required();
  add_integer(inspect, "--max-items", inspect_o.max_items, "array metadata items shown", 0, 1e9);
  auto* convert = app.add_subcommand("convert", "convert a model file (a `kiln train lm` checkpoint -> a GGUF model)");
  kiln::app::ConvertOptions convert_o;
  convert->add_option("in", convert_o.input, "checkpoint, run folder, safetensors file or manifest, GGUF file, ONNX model (its initializers)")->required();
  convert->add_option("out", convert_o.output, "a .gguf or .safetensors file")->required();
  convert->add_option("--quantize", convert_o.quantize, "q8_0 or q4_0 (GGUF output)")
      ->check(CLI::IsMember({"q8_0", "q4_0"}));

  CLI::App* eval_cmd = app.get_subcommand("eval");  // added with `kiln eval flow` (apps/kiln/flow_cli.h)
  auto* eval_lm = eval_cmd->add_subcommand("lm", "val loss of a `kiln train lm` checkpoint or a GGUF of `kiln convert` (quantized too)");
  kiln::app::EvalLmOptions eval_lm_o;
  eval_lm->add_option("--checkpoint", eval_lm_o.checkpoint, "a checkpoint file, a run folder, or a GGUF model")->required();
  eval_lm->add_option("--data", eval_lm_o.data, "the text the model was trained on")->required();
  add_integer(eval_lm, "--batches", eval_lm_o.batches, "batches (train lm's --eval-iters)", 1, 1e9);
  add_integer(eval_lm, "--batch-size", eval_lm_o.batch_size, "windows per batch (train lm's --batch-size)", 1, kMaxBatch);
  add_integer(eval_lm, "--seed", eval_lm_o.seed, "train lm's --seed (which windows)", 0, kMaxSeed);
  add_integer(eval_lm, "--threads", eval_lm_o.threads, "threads (default: all cores)", 1, kMaxThreads, false);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "kiln: error: %s (kiln --help)\n", e.what());
    return 2;
  }

  if (fashion->parsed()) {
    finish_run_flags(o_flags, o);
    return exit_status(kiln::app::train_fashion_mnist(o).signal);
  }
  if (vqvae.command->parsed()) return kiln::app::run_vqvae_command(vqvae);
  if (auto status = kiln::app::run_flow_commands(*flow)) return *status;
  if (lm->parsed()) {
    finish_run_flags(l_flags, l);
    return exit_status(kiln::app::train_lm(l).signal);
  }
  if (ppo->parsed()) {
    finish_run_flags(ppo_flags, ppo_o);
    return exit_status(kiln::app::run_ppo(ppo_o).signal);
  }
  for (int i = 0; i < 2; ++i) {
    if (!offpolicy[i]->parsed()) continue;
    kiln::app::OffPolicyJobOptions& op = i == 0 ? dqn_o : sac_o;
    finish_run_flags(offpolicy_flags[i], op);
    return exit_status(kiln::app::run_offpolicy(op).signal);
  }
  if (control->parsed()) {
    nlohmann::json request;
    try {
      request = kiln::app::control_request(control_words);
    } catch (const kiln::Error& e) {
      std::fprintf(stderr, "kiln: error: %s (kiln control --help)\n", e.what());
      return 2;
    }
    return kiln::app::print_control_answer(kiln::app::send_control_request(control_dir, request), std::cout);
  }
  if (inspect->parsed()) kiln::app::inspect_file(inspect_o);
  if (convert->parsed()) kiln::app::convert_file(convert_o);
  if (eval_lm->parsed()) {
    clamp_threads(eval_lm_o.threads);
    kiln::app::eval_lm(eval_lm_o);
  }
  if (gen->parsed()) {
    clamp_threads(g.threads);
    kiln::app::generate_text(g);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::set_terminate(on_terminate);
  try {
    return run(argc, argv);
  } catch (...) {
    return report(std::current_exception());
  }
}
