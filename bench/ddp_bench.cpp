// Data-parallel benches (issue 30): ddp_cnn_b64 and ddp_gpt_char run
// cnn_b64 and gpt_char on 2 ranks x 1 thread under mpirun (kiln_ddp_bench,
// bench/ddp_worker.cpp), bucketed during backward and as one all-reduce after
// it, through shared memory and through MPI; ddp_allreduce times one all-reduce against the message size. Compare
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
  // Default (the progress policy, shared memory), one bucket after backward,
  // a forced communication thread, and both ways again through MPI's all-reduce.
  for (const char* model : {"cnn", "gpt"}) {
    const std::string m = model;
    out.push_back({m == "cnn" ? "ddp_cnn_b64" : "ddp_gpt_char", [m](const std::string&) {
                     for (const char* v : {"", " --single-bucket", " --thread", " --mpi", " --mpi --single-bucket"})
                       run_ranks(m + v);
                   }});
  }
  out.push_back({"ddp_allreduce", [](const std::string&) { run_ranks("allreduce"); }});
}

}  // namespace bench
