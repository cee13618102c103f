// fit_to_memory (SPECS X5): the largest batch whose peak memory fits a
// budget, from three probe steps.
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
// step. Probe 1 (small, b1) creates the persistent state; probe 2, in the
// steady state where a probe's rise is exact, runs where about half of the
// room would go to the step; probe 3 near (1 - 2 x headroom) x budget, just
// below the target, by the larger of two estimates that each stay at or
// below it. The line through probes 2 and 3 is the
// model and the choice the largest b with peak(b) <= the target (probe 3's
// batch when it measured within the budget and the line says less: the
// allocator's size classes make the peak a staircase in b). The task's
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
  int64_t predicted_bytes = 0;  // the model's prediction for it (0 for probe 1, outside the steady state)
};

struct MemoryFit {
  int64_t batch = 0;                  // the choice
  int64_t budget_bytes = 0;
  int64_t predicted_peak_bytes = 0;   // peak(batch) by the model
  int64_t measured_peak_bytes = 0;    // probe 3's measurement when it is the choice, else 0
  int64_t persistent_bytes = 0;
  int64_t fixed_bytes = 0;
  double bytes_per_item = 0;
  std::vector<MemoryProbe> probes;    // the three probes, in order
};

struct MemoryFitOptions {
  int64_t min_batch = 1;
  int64_t max_batch = int64_t(1) << 20;
  int64_t first_probe = 0;   // 0: max(min_batch, 4)
  int64_t second_probe = 0;  // probe 2's batch; 0: where about half of the room goes to the step (by probe 1)
  int64_t multiple = 1;      // the choice is rounded down to a multiple of this (ranks, SIMD widths)
  double headroom = 0.05;    // the choice aims at (1 - headroom) x budget: the model's error stays inside it
  // The Task overload: input batches alive at once in the run, each probe
  // holding that many (a DataLoader keeps prefetch + 2 buffers: 4 by default).
  int batch_buffers = 4;
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
