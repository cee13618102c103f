#include "apps/kiln/memory_flag.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "apps/kiln/distributed_job.h"
#include "kiln/core/error.h"
#include "kiln/core/allocator.h"
#include "kiln/train/task.h"
#include "kiln/train/trainer.h"

namespace kiln::app {

int64_t parse_memory_budget(const std::string& op, const std::string& text) {
  if (text == "auto") return 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  std::string unit(end ? end : "");
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = value * scale;
  KILN_CHECK(end != text.c_str() && scale > 0 && std::isfinite(bytes) && bytes >= 1 && bytes < 9.0e18, op,
             "--memory-budget must be a size such as 256M, 1G or 300000000 (bytes), or auto; got '{}'", text);
  return int64_t(bytes);
}

int64_t fit_batch_to_memory(const std::string& op, const JobDistribution& ranks, train::Task& task,
                            const data::Dataset& data, int64_t budget_bytes, train::MemoryFitOptions options,
                            std::ostream& log, const std::string& unit, train::MemoryFit* fit_out) {
  int64_t per_rank = 0;
  if (ranks.primary()) {
    int64_t budget = budget_bytes;
    if (budget == 0 && ranks.local_size() > 1) {
      // "auto": the ranks on this machine share its memory.
      const int64_t machine = train::system_memory_budget();
      KILN_CHECK(machine > 0, op, "--memory-budget auto: cannot read the memory available (/proc/meminfo, cgroup)");
      budget = machine / ranks.local_size();
    }
    // An error here (not even min_batch fits) ends every rank: the job's
    // top-level handler aborts the run (abort_other_ranks).
    train::MemoryFit fit = train::fit_to_memory(task, data, budget, options);
    per_rank = fit.batch;
    const double kib = fit.bytes_per_item / 1024.0;
    fmt::print(log, "--memory-budget {} MiB{}: batch {} (predicted peak {:.1f} MiB; {:.1f} KiB per {}; probes", fit.budget_bytes >> 20,
               ranks.active() ? " per rank" : "", per_rank, fit.predicted_peak_bytes / 1048576.0, kib, unit);
    for (const train::MemoryProbe& p : fit.probes) fmt::print(log, " {}: {:.1f} MiB", p.batch, p.peak_bytes / 1048576.0);
    fmt::print(log, ")\n");
    if (fit_out) *fit_out = fit;
    if (ranks.active())
      fmt::print(log, "--memory-budget: {} per rank x {} ranks = global batch {}\n", per_rank, ranks.world_size(),
                 per_rank * ranks.world_size());
  }
  per_rank = ranks.from_primary(per_rank);
  return per_rank * ranks.world_size();
}

void MemoryBudgetReport::on_train_begin(train::Trainer&) { reset_peak_memory_stats(); }

void MemoryBudgetReport::on_train_end(train::Trainer& trainer) {
  const double peak = double(memory_stats().peak_bytes), predicted = double(fit_.predicted_peak_bytes);
  fmt::print(trainer.out(), "--memory-budget {} MiB: peak during training {:.1f} MiB ({:.2f}x the budget; predicted {:.1f} MiB, {:+.1f}%)\n",
             fit_.budget_bytes >> 20, peak / 1048576.0, peak / double(fit_.budget_bytes), predicted / 1048576.0,
             peak > 0 ? (predicted - peak) / peak * 100.0 : 0.0);
}

}  // namespace kiln::app
