// A data-parallel run that fails on purpose (tests/dist/fault_test.cpp), under
// `mpirun -np 2`:  kiln_dist_fault_worker MODE CKPT_DIR
//   MODE throw: rank 1 throws at step 12; its handler calls dist::abort_run,
//               which names the rank and the cause and ends every rank.
//   MODE kill:  rank 1 kills itself (SIGKILL) at step 12, in the middle of
//               training; rank 0 is then waiting in a gradient all-reduce.
// Rank 0 writes a checkpoint every 5 steps (atomic replace), so the folder
// holds the one of step 10 when the run dies.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>

#include "kiln/dist/data_parallel.h"
#include "kiln/dist/process_group.h"
#include "kiln/io/checkpoint.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/linear.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/random.h"
#include "kiln/optim/adam.h"
#include "kiln/train/steps.h"
#include "kiln/train/task.h"

using namespace kiln;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s throw|kill CKPT_DIR\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  dist::init(&argc, &argv);
  try {
    Rngs rngs{{"params", 0}};
    auto model = nn::make<nn::Sequential>();
    model->push_back(nn::Linear(6, 16, rngs));
    model->push_back(nn::Tanh());
    model->push_back(nn::Linear(16, 3, rngs));
    optim::AdamW opt(model->parameters(), {.lr = 0.01});
    train::Task task(model, opt, &rngs);
    dist::DataParallel ddp(*model);
    auto hooks = dist::trainer_hooks(ddp);
    std::filesystem::create_directories(dir);
    for (int step = 1; step <= 1000; ++step) {
      if (step == 12 && dist::rank() == 1) {
        if (mode == "throw") throw Error("fault_worker", "planned failure at step 12");
        std::raise(SIGKILL);
      }
      Generator g(uint64_t(step * 2 + dist::rank()));
      std::vector<data::Batch> mine = {{randn({4, 6}, g), randint(0, 3, {4}, g)}};
      task.accumulation_step(mine, hooks.get());
      if (dist::rank() == 0 && step % 5 == 0) io::Checkpoint().model(*model).optimizer(opt).save(dir + "/last.safetensors");
    }
  } catch (const std::exception& e) {
    dist::abort_run(e.what());
  }
  dist::finalize();
  return 0;
}
