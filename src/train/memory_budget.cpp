// fit_to_memory (kiln/train/memory_budget.h).
#include "kiln/train/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "kiln/core/allocator.h"
#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/data/dataset.h"
#include "kiln/io/checkpoint.h"
#include "kiln/train/task.h"

namespace kiln::train {

namespace {

constexpr int64_t kUnknown = std::numeric_limits<int64_t>::max();

// The first integer of a file ("max" and unreadable files: kUnknown).
int64_t read_bytes(const char* path) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word) || word == "max") return kUnknown;
  try {
    return std::stoll(word);
  } catch (...) {
    return kUnknown;
  }
}

int64_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return kUnknown;
}

int64_t cgroup_headroom() {
  int64_t limit = read_bytes("/sys/fs/cgroup/memory.max"), usage = read_bytes("/sys/fs/cgroup/memory.current");
  if (limit == kUnknown) {  // cgroup v1; an unlimited v1 limit is a huge number
    limit = read_bytes("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    usage = read_bytes("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    if (limit >= (int64_t(1) << 60)) limit = kUnknown;
  }
  if (limit == kUnknown || usage == kUnknown) return kUnknown;
  return std::max<int64_t>(0, limit - usage);
}

struct Measured {
  int64_t before = 0, peak = 0, after = 0;  // current bytes before, peak during, current after
};

Measured measure(const std::function<void(int64_t)>& probe, int64_t b) {
  reset_peak_memory_stats();
  Measured m;
  m.before = memory_stats().current_bytes;
  probe(b);
  MemoryStats s = memory_stats();
  m.peak = s.peak_bytes;
  m.after = s.current_bytes;
  return m;
}

}  // namespace

int64_t system_memory_budget() {
  const int64_t avail = std::min(mem_available(), cgroup_headroom());
  if (avail == kUnknown) return 0;
  return avail + memory_stats().current_bytes;
}

MemoryFit fit_to_memory(const std::function<void(int64_t)>& probe, int64_t budget_bytes,
                        const MemoryFitOptions& o) {
  constexpr const char* op = "fit_to_memory";
  KILN_CHECK(probe != nullptr, op, "the probe is empty");
  KILN_CHECK(o.min_batch >= 1 && o.max_batch >= o.min_batch && o.multiple >= 1, op,
             "need 1 <= min_batch <= max_batch and multiple >= 1, got min_batch {}, max_batch {}, multiple {}",
             o.min_batch, o.max_batch, o.multiple);
  KILN_CHECK(budget_bytes >= 0, op, "budget must be non-negative, got {}", budget_bytes);
  if (budget_bytes == 0) budget_bytes = system_memory_budget();
  KILN_CHECK(budget_bytes > 0, op, "no budget given and none could be read from the cgroup or /proc/meminfo");
  const int64_t b1 = std::clamp(o.first_probe > 0 ? o.first_probe : std::max<int64_t>(o.min_batch, 4), o.min_batch,
                                o.max_batch);
  KILN_CHECK(o.min_batch < o.max_batch, op, "min_batch == max_batch ({}): nothing to choose", b1);
  KILN_CHECK(o.headroom >= 0 && o.headroom < 1, op, "headroom must be in [0, 1), got {}", o.headroom);

  MemoryFit fit;
  fit.budget_bytes = budget_bytes;
  const double target = double(budget_bytes) * (1.0 - o.headroom);
  // Probe 1 allocates what persists (optimizer moments) during its step, so
  // its rise is not a steady step's.
  const Measured warm = measure(probe, b1);
  // Probe 2, in the steady state (a probe's rise above what existed before it
  // is exact there), where about half of the room goes to the step, by probe
  // 1's rise per item: an overestimate (it holds the new state and the fixed
  // part), so probe 2 stays well inside the budget.
  int64_t b2 = o.second_probe;
  if (b2 <= 0) {
    const double per_item = std::max(1.0, double(warm.peak - warm.before) / double(b1));
    b2 = std::max<int64_t>(2 * b1, int64_t(std::max(0.0, target - double(warm.after)) / 2.0 / per_item));
  }
  b2 = std::clamp(b2, o.min_batch, o.max_batch);
  if (b2 == b1) b2 = b1 < o.max_batch ? b1 + 1 : b1 - 1;
  const Measured m2 = measure(probe, b2);
  const double t2 = double(m2.peak - m2.before);
  // Probe 3 near the choice. Two estimates of the batch that reaches its
  // aim, each at or below it (on a straight line), the larger taken:
  // - probe 2's rise per item with no fixed part (fixed >= 0);
  // - the line through probe 2 and a lower bound of probe 1's steady rise,
  //   peak1 - after1 (what probe 1 rose above the state it left: the new
  //   state was not all there at its peak), whose slope is then an upper bound.
  // Two steady probes, one close to the choice, keep the line's error there
  // small although the peak is a staircase in b (the allocator rounds blocks
  // to size classes).
  // Aimed at 1 - 2 x headroom of the budget: the estimates assume one line,
  // but the peak can be the larger of two (the optimizer step's, flat in b,
  // under the activations'), and the probe itself must stay inside.
  const double room2 = double(budget_bytes) * (1.0 - 2.0 * o.headroom) - double(m2.before);
  int64_t b3 = int64_t(std::max(0.0, room2) / std::max(1.0, t2 / double(b2)));
  if (const double slope = (t2 - double(warm.peak - warm.after)) / double(b2 - b1); slope > 0)
    b3 = std::max<int64_t>(b3, b2 + int64_t(std::floor((room2 - t2) / slope)));
  b3 = std::clamp(b3, o.min_batch, o.max_batch);
  if (b3 == b2) b3 = b2 < o.max_batch ? b2 + 1 : b2 - 1;
  const Measured m3 = measure(probe, b3);
  const double t3 = double(m3.peak - m3.before);
  fit.probes = {{b1, warm.peak}, {b2, m2.peak}, {b3, m3.peak}};
  fit.persistent_bytes = m3.before;  // the state between steady steps
  // The model peak(b) = persistent + fixed + per_item * b: the line through
  // probes 2 and 3.
  fit.bytes_per_item = std::max(1.0, (t3 - t2) / double(b3 - b2));
  fit.fixed_bytes = int64_t(std::llround(t3 - fit.bytes_per_item * double(b3)));
  auto predict = [&](int64_t b) {
    return fit.persistent_bytes + fit.fixed_bytes + int64_t(std::llround(fit.bytes_per_item * double(b)));
  };
  // The largest batch the line puts at or below the target, rounded down to
  // `multiple`.
  const double room = target - double(fit.persistent_bytes + fit.fixed_bytes);
  int64_t b = room > 0 ? int64_t(std::floor(room / fit.bytes_per_item)) : 0;
  b = std::min(b, o.max_batch);
  b -= b % o.multiple;
  // A measurement beats the line: when probe 3 fitted and the line puts the
  // choice below it (a stair), probe 3's batch is the choice.
  if (m3.peak <= budget_bytes && b3 % o.multiple == 0 && b3 > b) b = b3;
  KILN_CHECK(b >= o.min_batch, op,
             "even batch {} does not fit a budget of {} MiB (persistent {:.1f} MiB, {:.1f} KiB per item)", o.min_batch,
             budget_bytes >> 20, fit.persistent_bytes / 1048576.0, fit.bytes_per_item / 1024.0);
  fit.batch = b;
  fit.predicted_peak_bytes = predict(b);
  for (MemoryProbe& p : fit.probes)
    if (&p != &fit.probes.front()) p.predicted_bytes = predict(p.batch);
  if (b == b3) fit.measured_peak_bytes = m3.peak;
  return fit;
}

MemoryFit fit_to_memory(Task& task, const data::Dataset& data, int64_t budget_bytes, const MemoryFitOptions& o) {
  constexpr const char* op = "fit_to_memory";
  KILN_CHECK(data.size() > 0, op, "the data set is empty");
  KILN_CHECK(o.batch_buffers >= 1, op, "batch_buffers must be at least 1, got {}", o.batch_buffers);
  // Saved before and restored after: the probes step the optimizer and draw
  // from the generators. A file, since io::Checkpoint restores from one.
  const std::string saved = (std::filesystem::temp_directory_path() /
                             ("kiln_fit_to_memory_" + std::to_string(::getpid()) + ".safetensors"))
                                .string();
  io::Checkpoint ckpt;
  task.checkpoint_objects(ckpt);
  ckpt.save(saved);
  const bool was_training = task.model().is_training();
  auto probe = [&](int64_t b) {
    std::vector<int64_t> idx;
    idx.resize(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) idx[size_t(i)] = i % data.size();
    data::Batch batch;
    {
      data::Example first = data.get(0);
      Shape in = first.input.shape();
      in.insert(0, b);
      batch.input = Tensor::empty(in, first.input.dtype());
      if (first.target.defined()) {
        Shape t = first.target.shape();
        t.insert(0, b);
        batch.target = Tensor::empty(t, first.target.dtype());
      }
    }
    data.gather(idx, batch);
    // The run's other batch buffers (the loader's prefetched and recycled
    // ones), alive during its steps: measured with the step.
    std::vector<Tensor> buffers;
    for (int i = 1; i < o.batch_buffers; ++i) {
      buffers.push_back(Tensor::empty(batch.input.shape(), batch.input.dtype()));
      if (batch.target.defined()) buffers.push_back(Tensor::empty(batch.target.shape(), batch.target.dtype()));
    }
    task.model().train();
    task.training_step(batch);
    task.model().eval();
    {
      NoGradGuard no_grad;
      task.validation_step(batch);
    }
  };
  MemoryFit fit;
  try {
    fit = fit_to_memory(probe, budget_bytes, o);
  } catch (...) {
    ckpt.load(saved);
    task.model().train(was_training);
    std::filesystem::remove(saved);
    throw;
  }
  ckpt.load(saved);
  task.model().train(was_training);
  std::filesystem::remove(saved);
  return fit;
}

}  // namespace kiln::train
