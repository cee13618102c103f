// The jobs' common flags (apps/kiln/run_flags.h).
#include "apps/kiln/run_flags.h"

#include <cstdio>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/core/parallel.h"

namespace kiln::app {

std::vector<std::string> override_list(const RunFlags& flags) {
  if (flags.sub->count("--override") == 0) return {};
  if (flags.override_text->empty()) return {"all"};
  std::vector<std::string> names;
  std::stringstream in(*flags.override_text);
  for (std::string name; std::getline(in, name, ',');)
    if (!name.empty()) names.push_back(name);
  return names;
}

void check_out(const RunFlags& flags, const std::string& out) {
  KILN_CHECK(flags.sub->count("--out") == 0 || !out.empty(), flags.op, "--out must name a folder, got ''");
}

// OpenMP fails far above the CPUs, and more threads than cores only slow kiln down.
void clamp_threads(int& threads) {
  const int cpus = kiln::available_cpus();
  if (threads <= cpus) return;
  std::fprintf(stderr, "kiln: --threads %d is more than the %d CPU%s available: using %d\n", threads, cpus,
               cpus == 1 ? "" : "s", cpus);
  threads = cpus;
}

}  // namespace kiln::app
