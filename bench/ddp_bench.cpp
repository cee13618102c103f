// Data-parallel benches (issue 30): ddp_cnn_b64 and ddp_gpt_char run
// cnn_b64 and gpt_char on 2 ranks x 1 thread under mpirun (kiln_ddp_bench,
// bench/ddp_worker.cpp), bucketed during backward and as one all-reduce after
// it; ddp_allreduce times one all-reduce against the message size. Compare
// throughput with cnn_b64 / gpt_char at 2 threads (1 process x 2 threads).
#include <cstdio>
#include <string>

#include "bench/bench.h"

namespace bench {

namespace {

// Runs kiln_ddp_bench under mpirun -np 2 and passes its JSON lines through.
void run_ranks(const std::string& args) {
#ifndef KILN_DDP_BENCH
  std::fprintf(stderr, "kiln_bench: built without MPI (KILN_WITH_MPI): no data-parallel benches\n");
  (void)args;
  return;
#else
  const std::string cmd = std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 KILN_NUM_THREADS=1 ") +
                          KILN_MPIEXEC + " -np 2 --oversubscribe --bind-to none " + KILN_DDP_BENCH + " " + args;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return;
  char line[1024];
  while (std::fgets(line, sizeof line, p)) {
    std::fputs(line, stdout);
    std::fflush(stdout);
  }
  pclose(p);
#endif
}

}  // namespace

void ddp_benches(std::vector<Bench>& out) {
  out.push_back({"ddp_cnn_b64", [](const std::string&) {
                   run_ranks("cnn");
                   run_ranks("cnn --single-bucket");
                   run_ranks("cnn --no-thread");
                 }});
  out.push_back({"ddp_gpt_char", [](const std::string&) {
                   run_ranks("gpt");
                   run_ranks("gpt --single-bucket");
                   run_ranks("gpt --no-thread");
                 }});
  out.push_back({"ddp_allreduce", [](const std::string&) { run_ranks("allreduce"); }});
}

}  // namespace bench
