// kiln_ddp_bench: the data-parallel benches (issue 30), run under mpirun by
// bench/ddp_bench.cpp (kiln_bench ddp_cnn_b64 | ddp_gpt_char | ddp_allreduce)
// or by hand:
//
//   mpirun -np 2 build-bench/bench/kiln_ddp_bench cnn  [--steps N] [--single-bucket] [--no-thread|--thread] [--mpi]
//   mpirun -np 2 build-bench/bench/kiln_ddp_bench gpt  [--steps N] [--single-bucket] [--no-thread|--thread] [--mpi]
//   mpirun -np 2 build-bench/bench/kiln_ddp_bench allreduce
//   mpirun -np 2 build-bench/bench/kiln_ddp_bench compare cnn|gpt [--steps N]
//
// cnn: bench/train_cnn_bench.cpp's cnn_b64 (global batch 64: 32 a rank), Adam;
// gpt: gpt_char (global batch 12 x 64 tokens: 6 sequences a rank), AdamW.
// Each rank runs its own threads (KILN_NUM_THREADS, 1 for the 2 x 1
// against 1 x 2 comparison). --single-bucket reduces everything in one
// all-reduce after backward instead of bucketing during it. Progress: by
// default DataParallel's policy (NOTE [Progress policy]; metric
// "comm_thread" says what it chose); --no-thread forces the gradient hooks
// (DataParallelOptions::overlap = false, metrics "_no_thread"), --thread a
// communication thread ("_thread"). --mpi reduces with MPI's all-reduce
// instead of through shared memory (shared_memory = false, "_mpi"; NOTE
// [Shared-memory reduction] in src/dist/shared_buckets.h). Rank 0 prints one
// JSON line per figure, as kiln_bench does: throughput over every rank, the
// seconds a step waited for communication that backward did not hide, and
// the CPU seconds a step cost over every rank ("cpu"), and its gradient
// communication's part ("comm_cpu"). Run without mpirun
// and KILN_NUM_THREADS=2 it is the 1 process x 2 threads reference (a world
// of one: DataParallel reduces nothing).
// allreduce: time of one all-reduce of 4 KiB .. 64 MiB f32 (median of 9), the
// scaling model's input (docs/distributed.md).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/dist/data_parallel.h"
#include "kiln/dist/process_group.h"

using namespace kiln;

namespace {

// CPU seconds of this process (every thread), for the cpu metric.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void emit(const std::string& bench, const std::string& metric, const char* unit, double value) {
  if (dist::rank() != 0) return;
  std::printf("{\"bench\": \"%s\", \"metric\": \"%s\", \"unit\": \"%s\", \"value\": %.6g}\n", bench.c_str(),
              metric.c_str(), unit, value);
  std::fflush(stdout);
}

nn::Sequential cnn_model(const nn::Init& init) {
  return nn::Sequential(nn::Conv2d(1, 32, 3, init, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(32, 64, 3, init, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                        nn::Linear(3136, 128, init), nn::ReLU(), nn::Linear(128, 10, init));
}

// Times `steps` synced steps after 3 warm-up steps; step() returns the seconds
// it waited and the CPU seconds its communication cost (DataParallel::last_*).
template <class Step>
void time_steps(const std::string& bench, const std::string& variant, int steps, double items, const char* unit,
                Step&& step) {
  for (int i = 0; i < 3; ++i) step();
  dist::barrier();
  double waited = 0, comm_cpu = 0;
  const double t0 = now(), c0 = cpu_now();
  for (int i = 0; i < steps; ++i) {
    auto [wait, comm] = step();
    waited += wait;
    comm_cpu += comm;
  }
  Tensor cpu = tensor(std::vector<double>{cpu_now() - c0, comm_cpu});
  dist::barrier();
  const double sec = (now() - t0) / steps;
  dist::all_reduce(cpu);  // over the ranks
  emit(bench, "throughput" + variant, unit, items / sec);
  emit(bench, "comm_wait" + variant, "ms/step", waited / steps * 1e3);
  // CPU time of a step summed over every rank's threads (compute, MPI's
  // polling, the communication thread): on a busy machine, where wall time
  // says little, the work a configuration costs; 2 x 1 against 1 x 2 here
  // bounds the throughput ratio a quiet machine can give.
  emit(bench, "cpu" + variant, "ms/step", cpu.to_vector<double>()[0] / steps * 1e3);
  // Its communication part, summed over ranks: the hooks' copies into the
  // buckets, the reductions, the waits that spin, the communication thread.
  emit(bench, "comm_cpu" + variant, "ms/step", cpu.to_vector<double>()[1] / steps * 1e3);
}

struct Variant {
  bool single = false;             // one bucket, reduced after backward
  std::optional<bool> overlap;     // unset: the policy
  bool mpi = false;                // MPI's all-reduce, not shared memory
  int64_t bucket_kib = 0;          // > 0: every bucket's cap (first and others), KiB
  // The metric suffix.
  std::string suffix() const {
    return std::string(single ? "_single_bucket" : "") + (overlap ? (*overlap ? "_thread" : "_no_thread") : "") +
           (mpi ? "_mpi" : "") + (bucket_kib > 0 ? "_bucket_" + std::to_string(bucket_kib) + "k" : "");
  }
  dist::DataParallelOptions options() const {
    dist::DataParallelOptions o;
    if (single) o.first_bucket_bytes = o.bucket_bytes = int64_t(1) << 40;
    if (bucket_kib > 0) o.first_bucket_bytes = o.bucket_bytes = bucket_kib << 10;
    o.overlap = overlap;
    o.shared_memory = !mpi;
    return o;
  }
};

void cnn(int steps, const Variant& v) {
  const int64_t global = 64, local = global / dist::world_size();
  Rngs rngs(0);
  nn::Sequential net = cnn_model(nn::Init(rngs));
  dist::DataParallel ddp(net, v.options());
  optim::Adam opt(net.parameters(), {.lr = 1e-3});
  Generator gen(uint64_t(1 + dist::rank()));
  Tensor x = randn({local, 1, 28, 28}, gen), y = randint(0, 10, {local}, gen);
  time_steps("ddp_cnn_b64", v.suffix(), steps, double(global), "samples/s", [&] {
    cross_entropy(net.forward(x), y).backward();
    ddp.synchronize();
    opt.step();
    opt.zero_grad();
    return std::pair{ddp.last_wait_seconds(), ddp.last_comm_cpu_seconds()};
  });
  // After the figures (bench/run takes a bench's first figure for its headline).
  emit("ddp_cnn_b64", "comm_thread" + v.suffix(), "bool", ddp.uses_comm_thread());
  emit("ddp_cnn_b64", "buckets" + v.suffix(), "count", double(ddp.bucket_sizes().size()));
}

void gpt(int steps, const Variant& v) {
  const int64_t global = 12, local = global / dist::world_size(), T = 64;
  Rngs rngs(0);
  models::GPTConfig cfg{};
  models::GPT model(cfg, rngs);
  dist::DataParallel ddp(model, v.options());
  optim::AdamW opt(model.parameters(), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1});
  Generator gen(uint64_t(1 + dist::rank()));
  Tensor idx = randint(0, cfg.vocab_size, {local, T}, gen), tgt = randint(0, cfg.vocab_size, {local, T}, gen);
  time_steps("ddp_gpt_char", v.suffix(), steps, double(global * T), "tokens/s", [&] {
    model.loss(idx, tgt).backward();
    ddp.synchronize();
    opt.step();
    opt.zero_grad();
    return std::pair{ddp.last_wait_seconds(), ddp.last_comm_cpu_seconds()};
  });
  // After the figures (bench/run takes a bench's first figure for its headline).
  emit("ddp_gpt_char", "comm_thread" + v.suffix(), "bool", ddp.uses_comm_thread());
  emit("ddp_gpt_char", "buckets" + v.suffix(), "count", double(ddp.bucket_sizes().size()));
}

// One configuration's model, DataParallel, optimizer and local batch, for
// compare(): step() runs one synced step and returns what time_steps' do.
struct Job {
  std::string name;
  std::shared_ptr<void> state;
  std::function<std::pair<double, double>()> step;
};

template <class Model, class Opt>
struct State {
  Rngs rngs{0};
  Model model;
  dist::DataParallel ddp;
  Opt opt;
  Tensor x, y;
  template <class MakeModel, class OptOptions>
  State(MakeModel&& make, const Variant& v, OptOptions o)
      : model(make(rngs)), ddp(model, v.options()), opt(model.parameters(), o) {}
};

Job make_job(const std::string& which, const Variant& v) {
  Generator gen(uint64_t(1 + dist::rank()));
  Job job{which + (v.suffix().empty() ? "_default" : v.suffix()), nullptr, nullptr};
  if (which == "cnn") {
    using S = State<nn::Sequential, optim::Adam>;
    auto s = std::make_shared<S>([](Rngs& r) { return cnn_model(nn::Init(r)); }, v, optim::AdamOptions{.lr = 1e-3});
    const int64_t local = 64 / dist::world_size();
    s->x = randn({local, 1, 28, 28}, gen);
    s->y = randint(0, 10, {local}, gen);
    job.step = [s = s.get()] {
      cross_entropy(s->model.forward(s->x), s->y).backward();
      s->ddp.synchronize();
      s->opt.step();
      s->opt.zero_grad();
      return std::pair{s->ddp.last_wait_seconds(), s->ddp.last_comm_cpu_seconds()};
    };
    job.state = s;
  } else {
    using S = State<models::GPT, optim::AdamW>;
    models::GPTConfig cfg{};
    auto s = std::make_shared<S>([&](Rngs& r) { return models::GPT(cfg, r); }, v,
                                 optim::AdamWOptions{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1});
    const int64_t local = 12 / dist::world_size(), T = 64;
    s->x = randint(0, cfg.vocab_size, {local, T}, gen);
    s->y = randint(0, cfg.vocab_size, {local, T}, gen);
    job.step = [s = s.get()] {
      s->model.loss(s->x, s->y).backward();
      s->ddp.synchronize();
      s->opt.step();
      s->opt.zero_grad();
      return std::pair{s->ddp.last_wait_seconds(), s->ddp.last_comm_cpu_seconds()};
    };
    job.state = s;
  }
  return job;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// compare cnn|gpt: the configurations' steps interleaved in one process (A B C
// D E, B C D E A, ...), so that each sees the same load; per configuration the
// medians over steps of the step's wall time (rank 0), its CPU and its
// communication's CPU (both summed over the ranks). Analysis, not bench/run.
void compare(const std::string& which, int steps) {
  std::vector<Variant> variants(5);
  variants[1].single = true;
  variants[2].mpi = true;
  variants[3].mpi = variants[3].single = true;
  variants[4].overlap = true;  // a communication thread, whatever the policy says
  std::vector<Job> jobs;
  for (const Variant& v : variants) jobs.push_back(make_job(which, v));
  const size_t n = jobs.size();
  for (int i = 0; i < 3; ++i)
    for (Job& j : jobs) j.step();
  std::vector<std::vector<double>> wall(n), cpu(n), comm(n);
  for (int i = 0; i < steps; ++i)
    for (size_t k = 0; k < n; ++k) {
      const size_t j = (k + size_t(i)) % n;
      const double t0 = now(), c0 = cpu_now();
      const double c = jobs[j].step().second;
      cpu[j].push_back(cpu_now() - c0);
      wall[j].push_back(now() - t0);
      comm[j].push_back(c);
    }
  for (size_t j = 0; j < n; ++j) {
    Tensor sums = tensor(cpu[j]), comms = tensor(comm[j]);
    dist::all_reduce(sums);
    dist::all_reduce(comms);
    const std::string bench = "compare_" + jobs[j].name;
    emit(bench, "step_wall_median", "ms", median(wall[j]) * 1e3);
    emit(bench, "cpu_median", "ms/step", median(sums.to_vector<double>()) * 1e3);
    emit(bench, "comm_cpu_median", "ms/step", median(comms.to_vector<double>()) * 1e3);
  }
}

void allreduce() {
  for (int64_t bytes = 4096; bytes <= (int64_t(64) << 20); bytes *= 4) {
    Tensor t = ones({bytes / 4});
    std::vector<double> times;
    for (int r = 0; r < 9; ++r) {
      dist::barrier();
      const double t0 = now();
      dist::all_reduce(t);
      times.push_back(now() - t0);
    }
    std::sort(times.begin(), times.end());
    emit("ddp_allreduce", "bytes_" + std::to_string(bytes), "us", times[4] * 1e6);
  }
}

}  // namespace

int main(int argc, char** argv) {
  dist::init(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  int steps = mode == "gpt" ? 20 : 10;
  Variant v;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--single-bucket")) v.single = true;
    else if (!std::strcmp(argv[i], "--no-thread")) v.overlap = false;
    else if (!std::strcmp(argv[i], "--thread")) v.overlap = true;
    else if (!std::strcmp(argv[i], "--mpi")) v.mpi = true;
    else if (!std::strcmp(argv[i], "--bucket-kib") && i + 1 < argc) v.bucket_kib = std::atoll(argv[++i]);
  }
  try {
    if (mode == "compare" && argc > 2) compare(argv[2], steps);
    else if (mode == "cnn") cnn(steps, v);
    else if (mode == "gpt") gpt(steps, v);
    else if (mode == "allreduce") allreduce();
    else {
      std::fprintf(stderr,
                   "usage: mpirun -np N %s cnn|gpt|allreduce [--steps N] [--single-bucket] [--no-thread|--thread] "
                   "[--mpi] [--bucket-kib N]\n       mpirun -np N %s compare cnn|gpt [--steps N]\n",
                   argv[0], argv[0]);
      return 2;
    }
  } catch (const std::exception& e) {
    dist::abort_run(e.what());
  }
  dist::finalize();
  return 0;
}
