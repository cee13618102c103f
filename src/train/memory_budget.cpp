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

constexpr int kMaxProbes = 7;

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
  // Probe 1 allocates what persists (optimizer moments) during its step, so
  // its rise is not a steady step's; probe 2 runs the same batch again in the
  // steady state, where a probe's rise above what existed before it is exact.
  const Measured warm = measure(probe, b1);
  const Measured m1 = measure(probe, b1);
  const double t1 = double(m1.peak - m1.before);
  // Probe 3 where about a quarter of the budget goes to the step, by probe
  // 2's bytes per item: the fit is then made among large tensors.
  int64_t b2 = o.second_probe;
  if (b2 <= 0) {
    const double per_item = std::max(1.0, t1 / double(b1));
    const double quarter = std::max(0.0, double(budget_bytes - m1.after) / 4.0);
    b2 = std::max<int64_t>(2 * b1, int64_t(quarter / per_item));
  }
  b2 = std::clamp(b2, o.min_batch, o.max_batch);
  if (b2 == b1) b2 = b1 < o.max_batch ? b1 + 1 : b1 - 1;
  Measured m2 = measure(probe, b2);
  fit.probes.push_back({b1, warm.peak, 0});
  fit.probes.push_back({b1, m1.peak, 0});
  fit.probes.push_back({b2, m2.peak, 0});
  fit.persistent_bytes = m2.after;
  const double t2 = double(m2.peak - m2.before);
  // The model peak(b) = persistent + fixed + per_item * b: the line through
  // two (batch, rise) points.
  struct Point {
    int64_t b;
    double rise;
  };
  auto fit_line = [&](Point p, Point q) {
    fit.bytes_per_item = std::max(1.0, (q.rise - p.rise) / double(q.b - p.b));
    fit.fixed_bytes = int64_t(std::llround(q.rise - fit.bytes_per_item * double(q.b)));
  };
  auto predict = [&](int64_t b) {
    return fit.persistent_bytes + fit.fixed_bytes + int64_t(std::llround(fit.bytes_per_item * double(b)));
  };
  // The largest batch the line puts at or below (1 - headroom) x budget.
  // Below min_batch when none is.
  auto largest_fitting = [&] {
    const double room = double(budget_bytes) * (1.0 - o.headroom) - double(fit.persistent_bytes + fit.fixed_bytes);
    int64_t b = room > 0 ? int64_t(std::floor(room / fit.bytes_per_item)) : 0;
    b = std::min(b, o.max_batch);
    return b - b % o.multiple;
  };
  auto choose = [&] {
    const int64_t b = largest_fitting();
    KILN_CHECK(b >= o.min_batch, op,
               "even batch {} does not fit a budget of {} MiB (persistent {:.1f} MiB, {:.1f} KiB per item)",
               o.min_batch, budget_bytes >> 20, fit.persistent_bytes / 1048576.0, fit.bytes_per_item / 1024.0);
    return b;
  };
  auto measure_choice = [&](int64_t b) {
    fit.batch = b;
    fit.predicted_peak_bytes = predict(b);
    Measured m = measure(probe, b);
    fit.probes.push_back({b, m.peak, fit.predicted_peak_bytes});
    fit.measured_peak_bytes = m.peak;
    return m;
  };
  Point last{b2, t2};
  fit_line({b1, t1}, last);
  fit.batch = choose();
  fit.predicted_peak_bytes = predict(fit.batch);
  if (!o.verify) return fit;
  // Probe 4 measures the choice. The rise is close to but not exactly linear
  // in b (the allocator rounds blocks to size classes: a staircase), so while
  // the choice measures over the budget or more than 2% off its prediction,
  // the line through the last two probes (a secant, exact at both) chooses
  // again and the next probe measures that.
  Measured m = measure_choice(fit.batch);
  while (int(fit.probes.size()) < kMaxProbes) {
    const bool fits = m.peak <= budget_bytes;
    if (fits && std::abs(double(fit.predicted_peak_bytes - m.peak)) <= 0.02 * double(m.peak)) break;
    const Point now{fit.batch, double(m.peak - m.before)};
    // On one stair of the staircase (or reversed by it) the secant says nothing.
    if ((now.rise - last.rise) * double(now.b - last.b) <= 0) break;
    fit_line(last, now);
    last = now;
    const int64_t again = largest_fitting();
    if (again == fit.batch || again < o.min_batch) break;
    m = measure_choice(again);
  }
  if (m.peak > budget_bytes) {
    // Over the budget after all. The largest steady-state probe that fitted
    // is a measured choice; without one, shrink the transient part by the
    // overshoot (not probed again).
    const MemoryProbe* fitted = nullptr;
    for (size_t i = 1; i < fit.probes.size(); ++i)
      if (fit.probes[i].peak_bytes <= budget_bytes && fit.probes[i].batch % o.multiple == 0 &&
          (!fitted || fit.probes[i].batch > fitted->batch))
        fitted = &fit.probes[i];
    if (fitted) {
      fit.batch = fitted->batch;
      fit.predicted_peak_bytes = fitted->predicted_bytes > 0 ? fitted->predicted_bytes : predict(fitted->batch);
      fit.measured_peak_bytes = fitted->peak_bytes;
      return fit;
    }
    const int64_t b = fit.batch;
    const double transient = double(m.peak - m.before);
    const double allowed = double(budget_bytes - m.before);
    int64_t smaller = transient > 0 ? int64_t(std::floor(double(b) * allowed / transient)) : b;
    smaller -= smaller % o.multiple;
    KILN_CHECK(smaller >= o.min_batch, op, "batch {} measured {} MiB, over the budget of {} MiB", b, m.peak >> 20,
               budget_bytes >> 20);
    fit.batch = smaller;
    fit.predicted_peak_bytes = predict(smaller);
    fit.measured_peak_bytes = 0;
  }
  return fit;
}

MemoryFit fit_to_memory(Task& task, const data::Dataset& data, int64_t budget_bytes, const MemoryFitOptions& o) {
  constexpr const char* op = "fit_to_memory";
  KILN_CHECK(data.size() > 0, op, "the data set is empty");
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
