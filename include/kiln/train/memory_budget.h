// fit_to_memory (SPECS X5): the largest batch whose peak memory fits a
// budget, from at most seven probe steps (usually four or five).
//
//   train::MemoryFit fit = train::fit_to_memory(task, *train_set, 256 << 20);   // or budget 0: from the system
//   data::DataLoader loader(train_set, {.batch_size = fit.batch});
//
// Each probe is one real step at batch b: task.training_step (forward,
// backward, optimizer step) and then task.validation_step on the same batch
// in eval mode, with the caching allocator's peak (memory_stats().peak_bytes,
// every tensor kiln holds: parameters, optimizer state, activations, batches)
// reset before it. Model: the steady-state peak is
//
//   peak(b) = persistent + fixed + per_item * b
//
// where persistent is what lives between steps after the first optimizer step
// (parameters, moments) and fixed + per_item * b the rise above it during a
// step. Probe 1 (small, b1) creates the persistent state; probe 2 runs b1
// again in the steady state, where a probe's rise is exact, and sizes probe 3
// (about a quarter of the budget for the step); the line through probes 2 and
// 3 is the model, and the chosen batch the largest with peak(b) <= (1 -
// headroom) x budget. Probe 4 runs that batch. While the last choice measures
// over the budget or more than 2% off its prediction (the allocator's size
// classes make the peak a staircase in b), the line through the last two
// probes chooses again and the next probe measures that. When the last probe
// still measures over the budget, the largest probe that fitted is taken, or
// else the batch shrinks by the measured ratio (not probed again). The task's
// model, optimizer and generators are saved before the probes and restored
// after them, so the probes leave no trace.
//
// For a sequence model, the unit is whatever the probe function scales:
// the overload taking a function lets it be batch x sequence (tokens).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace kiln::data {
class Dataset;
}

namespace kiln::train {

class Task;

struct MemoryProbe {
  int64_t batch = 0;
  int64_t peak_bytes = 0;       // measured
  int64_t predicted_bytes = 0;  // the model's prediction for it (0 for the two fitting probes)
};

struct MemoryFit {
  int64_t batch = 0;                  // the choice
  int64_t budget_bytes = 0;
  int64_t predicted_peak_bytes = 0;   // peak(batch) by the model
  int64_t measured_peak_bytes = 0;    // the last probe's measurement (0 when the choice was not probed)
  int64_t persistent_bytes = 0;
  int64_t fixed_bytes = 0;
  double bytes_per_item = 0;
  std::vector<MemoryProbe> probes;    // at most 7
};

struct MemoryFitOptions {
  int64_t min_batch = 1;
  int64_t max_batch = int64_t(1) << 20;
  int64_t first_probe = 0;   // 0: max(min_batch, 4)
  int64_t second_probe = 0;  // probe 3's batch; 0: where about a quarter of the budget goes to the step (by probe 2)
  int64_t multiple = 1;      // the choice is rounded down to a multiple of this (ranks, SIMD widths)
  bool verify = true;        // measure the choice (probes 4 and on)
  double headroom = 0.05;    // the choice aims at (1 - headroom) x budget: the model's error stays inside it
};

/// The memory a run may use when no budget is given: the least of
/// MemAvailable (/proc/meminfo) and the cgroup's limit less its usage (v2
/// memory.max / memory.current, or v1), plus the tensor bytes this process
/// already holds. 0 when none can be read.
int64_t system_memory_budget();

/// probe(b): one training step and one evaluation at batch b (b is what
/// memory scales with: a batch, or batch x sequence). budget_bytes 0:
/// system_memory_budget(). Errors name the budget when even min_batch does not fit.
MemoryFit fit_to_memory(const std::function<void(int64_t)>& probe, int64_t budget_bytes = 0,
                        const MemoryFitOptions& options = {});

/// The same for a Task over batches of `data` (examples repeated when the
/// data set is smaller than a probe's batch); the task's state is restored.
MemoryFit fit_to_memory(Task& task, const data::Dataset& data, int64_t budget_bytes = 0,
                        const MemoryFitOptions& options = {});

}  // namespace kiln::train
