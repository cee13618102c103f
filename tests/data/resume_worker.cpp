// One leg of the exact-resume test (tests/data/resume_test.cpp), in its own
// process so that nothing but the checkpoint carries over:
//
//   kiln_resume_worker straight THREADS STEPS OUT          train STEPS steps from scratch
//   kiln_resume_worker first    THREADS STEPS OUT CKPT     the same, then save CKPT
//   kiln_resume_worker resume   THREADS STEPS OUT CKPT     load CKPT into a differently
//                                                          initialised model, train STEPS more
//
// Every leg ends by saving a checkpoint to OUT (all tensors and all random
// state) and the losses of its steps to OUT.losses. The training uses every
// source of state a resume must restore: dropout's own generator, an Rngs
// stream (input noise), a shuffling sampler mid-epoch, AdamW's moments and
// step counts, a warmup+cosine schedule, gradient clipping, the progress.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/core/parallel.h"
#include "kiln/core/rngs.h"
#include "kiln/data/sampler.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/safetensors.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/linear.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/random.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/clip.h"
#include "kiln/optim/schedulers.h"

using namespace kiln;

namespace {

constexpr int64_t kSamples = 40, kBatch = 8, kFeatures = 8, kClasses = 3;

struct Net : nn::Module {
  nn::Shared<nn::Sequential> body;
  explicit Net(const nn::Init& init)
      : body(register_module("body", nn::Sequential(nn::Linear(kFeatures, 16, init), nn::ReLU(),
                                                    nn::Dropout(0.25, init), nn::Linear(16, kClasses, init)))) {}
  Tensor forward(const Tensor& x) const { return body(x); }
};

int run(const std::string& mode, int threads, int64_t steps, const std::string& out, const std::string& ckpt_path) {
  set_num_threads(threads);
  // The data set: fixed, not part of any state.
  Generator data_gen(123);
  Tensor x = randn({kSamples, kFeatures}, data_gen);
  Tensor y = randint(0, kClasses, {kSamples}, data_gen);

  // A resumed run starts from other weights: the checkpoint must overwrite all of them.
  Rngs rngs{{"params", mode == "resume" ? 999u : 0u}, {"dropout", 1}, {"noise", 2}};
  auto model = nn::make<Net>(rngs);
  optim::AdamW opt(model->parameters(), {.lr = 1e-2, .weight_decay = 0.1});
  optim::LinearWarmupCosineScheduler sched({.target_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 3, .total_steps = 20});
  data::Sampler order(kSamples, /*shuffle=*/true, /*seed=*/7);
  io::Progress progress;

  io::Checkpoint ckpt;
  ckpt.model(*model).optimizer(opt).scheduler(sched).rngs(rngs).progress(progress).state("data", order);
  if (mode == "resume") ckpt.load(ckpt_path);
  sched.apply(opt);

  std::vector<double> losses;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int64_t> idx = order.next(kBatch);
    if (idx.empty()) {
      order.next_epoch();
      ++progress.epoch;
      progress.step_in_epoch = 0;
      idx = order.next(kBatch);
    }
    Tensor index = tensor(idx);
    Generator noise = rngs.next("noise");
    Tensor xb = index_select(x, 0, index) + 0.01 * randn({int64_t(idx.size()), kFeatures}, noise);
    Tensor loss = cross_entropy(model(xb), index_select(y, 0, index));
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    sched.step(opt);
    opt.zero_grad();
    losses.push_back(loss.item<double>());
    ++progress.global_step;
    ++progress.step_in_epoch;
  }
  if (mode == "first") ckpt.save(ckpt_path);
  ckpt.save(out);
  io::save_safetensors(out + ".losses", {{"losses", tensor(losses)}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || (std::string(argv[1]) != "straight" && argc < 6)) {
    std::fprintf(stderr, "usage: %s straight|first|resume THREADS STEPS OUT [CKPT]\n", argv[0]);
    return 2;
  }
  try {
    return run(argv[1], std::atoi(argv[2]), std::atoll(argv[3]), argv[4], argc > 5 ? argv[5] : "");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
