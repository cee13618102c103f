// --memory-budget SIZE for the training jobs (SPECS X5, train::fit_to_memory):
// "256M", "1G", "1.5GiB", "300000000" (bytes) or "auto" (the cgroup limit and
// MemAvailable). The job picks its batch with three probe steps and prints, at
// the end of training, the peak it measured beside the prediction.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "kiln/train/callback.h"
#include "kiln/train/memory_budget.h"

namespace kiln::data {
class Dataset;
}
namespace kiln::train {
class Task;
}

namespace kiln::app {

/// Bytes of a --memory-budget value; 0 for "auto". kiln::Error "[op]
/// --memory-budget ..." for anything else.
int64_t parse_memory_budget(const std::string& op, const std::string& text);

class JobDistribution;

/// --memory-budget's global batch, under mpirun too. The budget is one
/// process' (each rank holds a model, its optimizer state and its share of
/// the batch); budget 0 ("auto") is the machine's free memory
/// (train::system_memory_budget) split among the ranks on this machine. Rank 0
/// probes (train::fit_to_memory: three steps on `data`, the task's state
/// restored after them) while the others wait; every rank gets rank 0's
/// per-rank batch, and the global batch is that times the world size. Call
/// it before the model is wrapped for data parallelism (JobDistribution::wrap),
/// so the probes' backwards reduce nothing. Prints the choice to log (rank
/// 0's log; `unit` names what the batch counts, e.g. "image" or "sequence").
/// `fit`, when given, receives rank 0's fit (on rank 0).
int64_t fit_batch_to_memory(const std::string& op, const JobDistribution& ranks, train::Task& task,
                            const data::Dataset& data, int64_t budget_bytes, train::MemoryFitOptions options,
                            std::ostream& log, const std::string& unit, train::MemoryFit* fit = nullptr);

/// The check of a --memory-budget choice on the run itself: the allocator's
/// peak (memory_stats().peak_bytes) is reset when training begins and printed
/// when it ends, beside the budget and the fit's prediction.
class MemoryBudgetReport : public train::Callback {
 public:
  explicit MemoryBudgetReport(train::MemoryFit fit) : fit_(std::move(fit)) {}
  void on_train_begin(train::Trainer& trainer) override;
  void on_train_end(train::Trainer& trainer) override;

 private:
  train::MemoryFit fit_;
};

}  // namespace kiln::app
