// The saving side of the CheckpointManager kill test
// (tests/io/checkpoint_manager_test.cpp, KilledAtRandomMomentsLosesNothing):
//
//   kiln_manager_worker DIR
//
// opens DIR like a resumed run (keep_last 2, keep_best), restores the latest
// checkpoint, writes "ready\n" to stdout, then saves step after step (every
// weight equal to the step, metric manager_metric(step)) until it is killed.
// It stops by itself after 20 s, should nobody kill it.
#include "tests/io/manager_worker.h"

#include <chrono>
#include <cstdio>
#include <string>

#include "kiln/core/rngs.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/nn/linear.h"
#include "kiln/ops/creation.h"

using namespace kiln;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    Rngs rngs{{"params", 0u}};
    nn::Linear model(2, 2, rngs);
    io::Progress progress;
    io::Checkpoint ckpt;
    ckpt.model(model).progress(progress);
    io::CheckpointManager manager(argv[1], testing::manager_worker_options());
    manager.restore_latest(ckpt);
    std::printf("ready\n");
    std::fflush(stdout);
    auto start = std::chrono::steady_clock::now();
    for (int64_t step = progress.global_step + 1; std::chrono::steady_clock::now() - start < std::chrono::seconds(20);
         ++step) {
      model.load_state_dict({{"weight", full({2, 2}, double(step))}, {"bias", full({2}, double(step))}});
      progress.global_step = step;
      manager.save(ckpt, step, testing::manager_metric(step));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
