// Benches for one optimizer step (bench/run), the same parameter lists as
// bench/torch_optim.py:
//   adamw_1m    optim::AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay
//               1e-2) over 9 f32 tensors, 1,000,016 elements in all
//   adamw_10m   the same over 9 tensors, 10,000,360 elements
// Only steady-state steps are timed: the warm-up steps of seconds_per_call
// allocate the moments. Each parameter keeps the same gradient for every step.
//
// Metrics:
//   time           ms/step
//   gbps           parameter + state traffic per step / time, 1e9 bytes per GB:
//                  read param, grad, exp_avg, exp_avg_sq and write param,
//                  exp_avg, exp_avg_sq = 7 x 4 bytes per element
//   copy_gbps      this machine's memory bandwidth, by a copy probe: std::memcpy
//                  of twice the last-level cache (at least 256 MiB), read + write
//                  bytes counted, the median of the repetitions, on one thread
//                  and on kiln's thread count, the better of the two
//   time_malloc_tuned  = time (see bench/torch_optim.py: torch's step without
//                  its page faults; kiln's allocates nothing)
//   copy_fraction  gbps / copy_gbps: how close the step comes to streaming at
//                  the copy rate (1.0). adamw_1m's 16 MB of parameters and
//                  state can partly stay in the last-level cache, so its
//                  fraction may exceed 1.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "bench/bench.h"
#include "kiln/kiln.h"
#include "kiln/optim/adam.h"

namespace bench {

namespace {

// A model-like layout: an embedding, an MLP block (weights and biases), a
// norm's scale and shift, and a classifier head. d = model width, h = hidden.
std::vector<kiln::Shape> model_shapes(int64_t vocab, int64_t d, int64_t h, int64_t classes) {
  return {{vocab, d}, {h, d}, {h}, {d, h}, {d}, {d}, {d}, {classes, d}, {classes}};
}

// 1,000,016 elements; keep in step with bench/torch_optim.py.
std::vector<kiln::Shape> shapes_1m() { return model_shapes(1000, 256, 1024, 848); }

// The copy probe: GB/s (1e9 bytes) of std::memcpy of `bytes`, read and
// write bytes counted; median of max(g_reps, 11) copies, after one warm-up copy,
// on `threads` threads (contiguous slices over kiln's pool).
double memcpy_gbps(const char* src, char* dst, int64_t bytes, int threads) {
  const int64_t blocks = 256, block = bytes / blocks;  // 1 MiB blocks or more
  bench::ScopedThreads scoped(threads);
  auto copy = [&] {
    kiln::parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
      std::memcpy(dst + lo * block, src + lo * block, size_t((hi - lo) * block));
    });
  };
  copy();
  std::vector<double> v;
  for (int r = 0; r < std::max(g_reps, 11); ++r) {
    auto t0 = Clock::now();
    copy();
    v.push_back(2.0 * double(bytes) / std::chrono::duration<double>(Clock::now() - t0).count() * 1e-9);
  }
  return median(v);
}

// Measured once per process, so both benches divide by the same figure.
double copy_probe_gbps() {
  static const double gbps = [] {
    // Twice the last-level cache (at least 256 MiB), so the copy streams from
    // memory: this machine reports a 508 MiB L3.
    const int64_t l3 = std::max<int64_t>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
    const int64_t bytes = std::max<int64_t>(int64_t(256) << 20, (2 * l3 + (256 << 20) - 1) / (256 << 20) * (256 << 20));
    std::unique_ptr<char[]> src(new char[size_t(bytes)]), dst(new char[size_t(bytes)]);
    std::memset(src.get(), 1, size_t(bytes));  // fault every page in before timing
    std::memset(dst.get(), 0, size_t(bytes));
    double best = memcpy_gbps(src.get(), dst.get(), bytes, 1);
    if (kiln::get_num_threads() > 1)
      best = std::max(best, memcpy_gbps(src.get(), dst.get(), bytes, kiln::get_num_threads()));
    return best;
  }();
  return gbps;
}

void bench_adamw(const std::string& name, const std::vector<kiln::Shape>& shapes) {
  kiln::Generator gen(0);
  std::vector<kiln::nn::Parameter> params;
  int64_t numel = 0;
  for (const kiln::Shape& s : shapes) {
    kiln::nn::Parameter p(kiln::randn(s, gen));  // decay on for all, as torch's single group
    p.value().set_grad(kiln::randn(s, gen));
    numel += p.numel();
    params.push_back(p);
  }
  kiln::optim::AdamW opt(kiln::nn::ParameterList(params),
                         {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2});
  double sec = seconds_per_call([&] { opt.step(); }, 0.3);
  double gbps = 7.0 * 4.0 * double(numel) / sec * 1e-9;
  double copy = copy_probe_gbps();
  emit(name, "time", "ms/step", sec * 1e3);
  // kiln's step allocates nothing, so malloc settings cannot change it: the
  // same figure, printed so bench/run pairs it with torch's fault-free time.
  emit(name, "time_malloc_tuned", "ms/step", sec * 1e3);
  emit(name, "gbps", "GB/s", gbps);
  emit(name, "copy_fraction", "fraction of copy_gbps", gbps / copy);
  emit(name, "copy_gbps", "GB/s", copy);
}

}  // namespace

// 10,000,360 elements (bench.h); keep in step with bench/torch_optim.py.
std::vector<kiln::Shape> shapes_10m() { return model_shapes(14427, 512, 2048, 1000); }

void optim_benches(std::vector<Bench>& out) {
  out.push_back({"adamw_1m", [](const std::string& n) { bench_adamw(n, shapes_1m()); }});
  out.push_back({"adamw_10m", [](const std::string& n) { bench_adamw(n, shapes_10m()); }});
}

}  // namespace bench
