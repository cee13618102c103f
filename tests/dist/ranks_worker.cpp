// The dist tests that need several processes: googletest on every rank of
// `mpirun -np 2` (ctest Dist.ranks_np2); any rank's failure fails the run.
//
// The exactness tests (issue 30): 2 ranks with DataParallel equal one process
// accumulating the same two micro-batches bit for bit (parameters after 50
// AdamW steps), and one process over the combined batch within 1e-5 (another
// summation order), masked losses included.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>
#include <utility>

#include "kiln/core/parallel.h"
#include "tests/support/dist_testing.h"

namespace kiln {
namespace {

int R() { return dist::rank(); }
int W() { return dist::world_size(); }

TEST(Collectives, AllReduceSumMeanMaxMin) {
  ASSERT_EQ(W(), 2) << "run under mpirun -np 2";
  Tensor f = tensor(std::vector<float>{1.5f * float(R() + 1), -1.0f, 0.25f});
  dist::all_reduce(f);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{4.5f, -2.0f, 0.5f}));
  Tensor d = tensor(std::vector<double>{double(R()), 3.0});
  dist::all_reduce(d, dist::ReduceOp::Mean);
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{0.5, 3.0}));
  Tensor i = tensor(std::vector<int64_t>{int64_t(R()) * 10, -int64_t(R())});
  dist::all_reduce(i, dist::ReduceOp::Max);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{10, 0}));
  Tensor j = tensor(std::vector<int32_t>{R(), 7});
  dist::all_reduce(j, dist::ReduceOp::Min);
  EXPECT_EQ(j.to_vector<int32_t>(), (std::vector<int32_t>{0, 7}));
}

TEST(Collectives, BroadcastAndAllGather) {
  Tensor t = full({2, 3}, double(R() + 5), {.dtype = kF64});
  dist::broadcast(t, 1);
  EXPECT_EQ(t.to_vector<double>(), std::vector<double>(6, 6.0));
  Tensor b = full({4}, double(R()), {.dtype = kBF16});
  dist::broadcast(b, 0);
  EXPECT_EQ(max(abs(b.to(kF32))).item<float>(), 0.0f);
  Tensor g = dist::all_gather(tensor(std::vector<int64_t>{R(), R() * 2}));
  EXPECT_EQ(g.shape(), (Shape{2, 2}));
  EXPECT_EQ(g.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 2}));
  dist::barrier();
}

TEST(Collectives, BadArgumentsAreErrorsOnTheCallingRank) {
  Tensor h = tensor(std::vector<float>{1, 2}).to(kBF16);
  EXPECT_THROW(dist::all_reduce(h), Error);  // no bf16 sum
  Tensor nc = transpose(ones({2, 3}), 0, 1);
  EXPECT_THROW(dist::all_reduce(nc), Error);
  Tensor ok = ones({2});
  EXPECT_THROW(dist::broadcast(ok, 2), Error);
  Tensor mask = ones({2}, {.dtype = kBool});
  EXPECT_THROW(dist::all_reduce(mask), Error);
  try {
    dist::broadcast(ok, -1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dist.broadcast"), std::string::npos) << e.what();
  }
}

// ---- DataParallel ----

// Classification over [N, T] positions; targets -100 are ignored (masked), so
// micro-batches hold uneven numbers of valid items.
struct MaskedTask : train::Task {
  using Task::Task;
  int64_t valid_count(const data::Batch& b) override { return sum(ne(b.target, int64_t(-100))).item<int64_t>(); }
  train::LossSum loss_sum(const data::Batch& b) override {
    return {cross_entropy(forward()(b.input), b.target, {.reduction = Reduction::Sum}), -1};
  }
  train::StepResult training_step(const data::Batch& b) override {  // the combined batch's mean
    Tensor loss = cross_entropy(forward()(b.input), b.target);
    return {loss.item<double>(), b.size(), -1, train::update(loss, optimizer())};
  }
};

struct Net {
  // Every rank seeds differently: DataParallel's broadcast makes rank 0's weights everyone's.
  explicit Net(uint64_t seed, bool masked)
      : rngs{{"params", seed}}, model(nn::make<nn::Sequential>()) {
    model->push_back(nn::Linear(6, 16, rngs));
    model->push_back(nn::Tanh());
    model->push_back(nn::Linear(16, 16, rngs));
    model->push_back(nn::ReLU());
    model->push_back(nn::Linear(16, 3, rngs));
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.01});
    task = masked ? std::unique_ptr<train::Task>(std::make_unique<MaskedTask>(model, *opt, &rngs))
                  : std::make_unique<train::Task>(model, *opt, &rngs);
  }
  std::vector<Tensor> weights() const {
    std::vector<Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.value().clone());
    return out;
  }
  Rngs rngs;
  nn::Shared<nn::Sequential> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<train::Task> task;
};

// Step s's micro-batch k (k = 0, 1): the same on every rank. Masked: [N, 4, 6]
// inputs with some targets -100; else [N, 6]. N differs between the two.
data::Batch micro_batch(int s, int k, bool masked) {
  Generator g(uint64_t(1000 + 10 * s + k));
  const int64_t n = k == 0 ? 5 : 3;
  if (!masked) {
    Tensor x = randn({n, 6}, g);
    Tensor y = randint(0, 3, {n}, g);
    return {x, y};
  }
  Tensor x = randn({n, 4, 6}, g);
  Tensor y = randint(0, 3, {n, 4}, g);
  Tensor drop = lt(rand({n, 4}, g), k == 0 ? 0.6 : 0.2);
  return {x, where(drop, -100, y)};
}

bool same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].nbytes() != b[i].nbytes() || std::memcmp(a[i].data_ptr(), b[i].data_ptr(), size_t(a[i].nbytes())) != 0)
      return false;
  return true;
}

double max_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, max(abs(sub(a[i], b[i]))).item<double>());
  return m;
}

// masked, overlap (communication thread), bucket bytes, shared memory (else MPI's all-reduce)
struct Exactness : ::testing::TestWithParam<std::tuple<bool, bool, int64_t, bool>> {};

TEST_P(Exactness, TwoRanksEqualOneProcessAccumulatingBitForBit) {
  const auto [masked, overlap, bucket, shared] = GetParam();
  constexpr int kSteps = 50;
  Net ddp_net(uint64_t(7 + R()), masked);  // rank 1's init differs until the broadcast
  dist::DataParallel ddp(*ddp_net.model, {.first_bucket_bytes = bucket, .bucket_bytes = bucket * 4,
                                          .overlap = overlap, .shared_memory = shared});
  EXPECT_EQ(ddp.uses_shared_memory(), shared);  // both ranks on this machine
  EXPECT_EQ(ddp.uses_comm_thread(), overlap && dist::thread_multiple());
  if (bucket < 1024) {
    EXPECT_GT(ddp.bucket_sizes().size(), 2u);
  }
  auto hooks = dist::trainer_hooks(ddp);
  Net accumulated(7, masked), combined(7, masked);
  for (int s = 0; s < kSteps; ++s) {
    data::Batch b0 = micro_batch(s, 0, masked), b1 = micro_batch(s, 1, masked);
    std::vector<data::Batch> mine = {R() == 0 ? b0 : b1};
    train::StepResult r = ddp_net.task->accumulation_step(mine, hooks.get());
    std::vector<data::Batch> both = {b0, b1};
    train::StepResult a = accumulated.task->accumulation_step(both, nullptr);
    EXPECT_EQ(r.count, a.count);
    EXPECT_NEAR(r.loss, a.loss, 1e-6);
    data::Batch all{cat({b0.input, b1.input}, 0), cat({b0.target, b1.target}, 0)};
    combined.task->training_step(all);
  }
  EXPECT_TRUE(same_bits(ddp_net.weights(), accumulated.weights()))
      << "rank " << R() << ": max difference " << max_diff(ddp_net.weights(), accumulated.weights());
  EXPECT_LE(max_diff(ddp_net.weights(), combined.weights()), 1e-5);
  // Every rank holds the same parameters.
  for (Tensor w : ddp_net.weights()) {
    Tensor other = w.clone();
    dist::broadcast(other, 0);
    EXPECT_TRUE(same_bits({w}, {other}));
  }
}

INSTANTIATE_TEST_SUITE_P(Dist, Exactness,
                         ::testing::Values(std::make_tuple(false, true, int64_t(1) << 20, true),
                                           std::make_tuple(true, true, int64_t(1) << 20, true),
                                           std::make_tuple(false, true, int64_t(256), true),
                                           std::make_tuple(true, false, int64_t(256), true),
                                           std::make_tuple(false, false, int64_t(1) << 20, true),
                                           std::make_tuple(true, true, int64_t(256), false),
                                           std::make_tuple(false, false, int64_t(256), false),
                                           std::make_tuple(true, false, int64_t(1) << 20, false)));

TEST(DataParallel, ProgressFollowsThePolicyUnlessForced) {
  Net net(uint64_t(19 + R()), false);
  dist::DataParallel thread(*net.model, {.overlap = true});
  EXPECT_EQ(thread.uses_comm_thread(), dist::thread_multiple());
  dist::DataParallel hooks(*net.model, {.overlap = false});
  EXPECT_FALSE(hooks.uses_comm_thread());
  // Unset: NOTE [Progress policy], with Dist.ranks_np2's 2 unbound ranks
  // (both on this machine) of get_num_threads() threads (KILN_NUM_THREADS=1).
  dist::DataParallel chosen(*net.model);
  const int machine = int(std::thread::hardware_concurrency());
  EXPECT_EQ(chosen.uses_comm_thread(),
            dist::thread_multiple() && dist::comm_thread_has_a_core(2, get_num_threads(), available_cpus(), machine));
  if (machine <= 2) {
    EXPECT_FALSE(chosen.uses_comm_thread());  // this 2-core machine: the hooks
  }
}

// A small classifier with one large layer: Linear(64, 600)'s weight (38,400
// elements) spans several of the shared-memory reduction's 64 KiB chunks.
nn::Shared<nn::Sequential> wide_net(uint64_t seed, DType dtype) {
  Rngs rngs{{"params", seed}};
  auto m = nn::make<nn::Sequential>();
  m->push_back(nn::Linear(64, 600, rngs));
  m->push_back(nn::Tanh());
  m->push_back(nn::Linear(600, 5, rngs));
  m->to(dtype);
  return m;
}

TEST(DataParallel, SharedMemoryAndMpiReduceToTheSameBits) {
  for (DType dtype : {kF32, kF64}) {
    for (int64_t first : {int64_t(4096), int64_t(1) << 20}) {  // several buckets, or one
      std::vector<std::vector<Tensor>> grads;
      for (bool shared : {true, false}) {
        for (bool overlap : {false, true}) {
          auto net = wide_net(uint64_t(23 + R()), dtype);
          dist::DataParallel ddp(*net, {.first_bucket_bytes = first, .bucket_bytes = first,
                                        .reduce = dist::ReduceOp::Mean, .overlap = overlap,
                                        .shared_memory = shared});
          ASSERT_EQ(ddp.uses_shared_memory(), shared);
          Generator g(uint64_t(60 + R()));
          Tensor x = randn({7, 64}, g).to(dtype);
          for (int step = 0; step < 3; ++step) {  // three reductions of each bucket
            for (auto& p : net->parameters()) {
              Tensor grad = p.value().grad();
              if (grad.defined()) zero_(grad);
            }
            sum(mul(net->forward(x), double(step + 1))).backward();
            ddp.synchronize();
          }
          // The communication's CPU (copies into the buckets, reductions, waits) was measured.
          EXPECT_GT(ddp.last_comm_cpu_seconds(), 0.0);
          EXPECT_LT(ddp.last_comm_cpu_seconds(), 10.0);
          std::vector<Tensor> mine;
          for (const auto& p : net->parameters()) mine.push_back(p.value().grad().clone());
          grads.push_back(mine);
        }
      }
      // grads: shared memory (hooks, thread), then MPI (hooks, thread). With 2
      // ranks every transport adds g0 + g1: the same bits. With more, MPI's
      // order of additions is its own (shared memory adds in rank order).
      for (size_t i = 1; i < grads.size(); ++i) {
        if (W() == 2 || i == 1 || i == 3) {
          const size_t ref = W() == 2 ? 0 : i - 1;
          EXPECT_TRUE(same_bits(grads[ref], grads[i])) << name(dtype) << " first bucket " << first << " variant " << i
                                                       << ": max difference " << max_diff(grads[ref], grads[i]);
        } else {
          EXPECT_LE(max_diff(grads[0], grads[i]), 1e-5) << name(dtype) << " variant " << i;
        }
      }
      // Every rank holds the same sums.
      for (const Tensor& t : grads[0]) {
        Tensor other = t.clone();
        dist::broadcast(other, 0);
        EXPECT_TRUE(same_bits({t}, {other}));
      }
    }
  }
}

TEST(DataParallel, MeanReduceIsPyTorchsDdpAndNoSyncAccumulates) {
  // Each rank's own mean loss, gradients averaged (ReduceOp::Mean): with equal
  // halves, one process's mean over the combined batch.
  Net net(uint64_t(3 + R()), false), ref(3, false);
  dist::DataParallel ddp(*net.model, {.first_bucket_bytes = 512, .bucket_bytes = 2048});
  for (int s = 0; s < 5; ++s) {
    Generator g(uint64_t(50 + s));
    Tensor x = randn({8, 6}, g);
    Tensor y = randint(0, 3, {8}, g);
    Tensor xs = narrow(x, 0, 4 * R(), 4), ys = narrow(y, 0, 4 * R(), 4);
    // Two halves of the rank's share: no_sync for the first, synced for the second.
    {
      auto guard = ddp.no_sync();
      mul(cross_entropy(net.model(narrow(xs, 0, 0, 2)), narrow(ys, 0, 0, 2)), 0.5).backward();
    }
    mul(cross_entropy(net.model(narrow(xs, 0, 2, 2)), narrow(ys, 0, 2, 2)), 0.5).backward();
    ddp.synchronize();  // already done by the last bucket's hook: a no-op
    net.opt->step();
    net.opt->zero_grad();
    ref.task->training_step({x, y});
  }
  EXPECT_LE(max_diff(net.weights(), ref.weights()), 1e-5);
}

TEST(DataParallel, UnusedParametersCountAsZero) {
  Net net(uint64_t(11 + R()), false);
  dist::DataParallel ddp(*net.model, {.first_bucket_bytes = 64, .bucket_bytes = 64});
  // Rank 1 uses only the last layer's bias, rank 0 everything.
  Tensor x = ones({2, 6});
  Tensor last_bias;
  for (const auto& p : net.model->parameters()) last_bias = p.value();
  Tensor loss = R() == 0 ? sum(net.model(x)) : sum(last_bias);
  loss.backward();
  ddp.synchronize();
  for (const auto& p : net.model->parameters()) {
    Tensor g = p.grad();
    ASSERT_TRUE(g.defined());
    Tensor other = g.clone();
    dist::broadcast(other, 0);
    EXPECT_TRUE(same_bits({g}, {other}));
  }
}

TEST(DataParallel, GradientsAreViewsOfTheBucketBuffers) {
  Net net(uint64_t(13 + R()), false);
  for (auto [overlap, shared] : {std::pair{true, true}, std::pair{false, true}, std::pair{true, false},
                                 std::pair{false, false}}) {
    dist::DataParallel ddp(*net.model, {.overlap = overlap, .shared_memory = shared});
    ASSERT_EQ(ddp.bucket_sizes().size(), 1u);  // 1 MiB holds the whole net
    Tensor x = full({2, 6}, double(R() + 1));
    sum(net.model(x)).backward();
    ddp.synchronize();
    // In reverse registration order, each gradient's slot follows the
    // previous one's at the next 64-byte boundary: one buffer, reduced in place.
    std::vector<Tensor> grads;
    for (const auto& p : net.model->parameters()) grads.insert(grads.begin(), p.grad());
    const char* next = nullptr;
    for (const Tensor& g : grads) {
      const auto* at = static_cast<const char*>(g.data_ptr());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(at) % 64, 0u);
      if (next) {
        EXPECT_EQ(at, next);
      }
      next = at + (g.nbytes() + 63) / 64 * 64;
    }
    // They hold the sums: every rank's are the same.
    for (const Tensor& g : grads) {
      Tensor other = g.clone();
      dist::broadcast(other, 0);
      EXPECT_TRUE(same_bits({g}, {other})) << (overlap ? "thread" : "hooks") << (shared ? ", shared memory" : ", MPI");
    }
    // A second step on the same views: zero_grad(set_to_none = false) keeps
    // them, backward accumulates onto zeros, the sums are the same again.
    std::vector<Tensor> first;
    for (const Tensor& g : grads) first.push_back(g.clone());
    net.opt->zero_grad(false);
    sum(net.model(x)).backward();
    ddp.synchronize();
    std::vector<Tensor> again;
    for (const auto& p : net.model->parameters()) again.insert(again.begin(), p.grad());
    EXPECT_TRUE(same_bits(first, again)) << (overlap ? "thread" : "hooks") << (shared ? ", shared memory" : ", MPI");
    net.opt->zero_grad();
  }
}

TEST(DataParallel, BucketsCloseOnceTheyHoldTheirCap) {
  // Reverse registration order: bias3 (3 floats, 12 B), weight3 (48 floats,
  // 192 B), bias2 (64 B), weight2 (1 KiB), bias1 (64 B), weight1 (384 B).
  // PyTorch's rule: the tensor that crosses the cap joins the bucket and
  // closes it, so weight3, ready early, is reduced with bias3.
  Net net(uint64_t(17 + R()), false);
  dist::DataParallel ddp(*net.model, {.first_bucket_bytes = 64, .bucket_bytes = 1024});
  EXPECT_EQ(ddp.bucket_sizes(), (std::vector<int64_t>{2, 2, 2}));
  dist::DataParallel one(*net.model, {.first_bucket_bytes = int64_t(1) << 20});
  EXPECT_EQ(one.bucket_sizes(), (std::vector<int64_t>{6}));
}

TEST(DataParallel, Errors) {
  Rngs rngs{{"params", 0}};
  auto bf = nn::make<nn::Linear>(2, 2, nn::Init(rngs));
  bf->to(kBF16);
  EXPECT_THROW({ dist::DataParallel d(*bf); }, Error);
  auto lin = nn::make<nn::Linear>(2, 2, nn::Init(rngs));
  EXPECT_THROW({ dist::DataParallel d(*lin, {.bucket_bytes = 0}); }, Error);
  EXPECT_THROW({ dist::DataParallel d(*lin, {.reduce = dist::ReduceOp::Max}); }, Error);
}

// ---- Trainer under DataParallel, sharded data, resume at another world size ----

// Records each step's loss; rank 0 saves the whole run at step `save_at`.
struct Recorder : train::Callback {
  Recorder(std::string path, int64_t save_at) : path(std::move(path)), save_at(save_at) {}
  void on_step_end(train::Trainer& t, const train::StepResult& r) override {
    losses.push_back(r.loss);
    if (t.progress().global_step == save_at && t.rank() == 0) t.checkpoint().save(path);
  }
  std::string path;
  int64_t save_at;
  std::vector<double> losses;
};

std::shared_ptr<data::TensorDataset> blobs(int64_t n, uint64_t seed = 21) {
  Generator g(seed);
  Tensor x = randn({n, 6}, g);
  Tensor y = argmax(narrow(x, 1, 0, 3), 1);
  return std::make_shared<data::TensorDataset>(x, y);
}

TEST(TrainerDataParallel, ResumeAtWorldOneFromATwoRankCheckpointKeepsTheLosses) {
  auto set = blobs(37);  // 37 = 4 * 8 + 5: each epoch ends with a short global batch
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kiln_dist_resume_" + std::to_string(::getppid()) + ".safetensors")).string();
  constexpr int64_t kSaveAt = 7;
  std::vector<double> two_rank;
  {
    Net net(uint64_t(5 + R()), false);
    dist::DataParallel ddp(*net.model);
    data::DataLoader loader(set, {.batch_size = 4, .seed = 2, .rank = R(), .world_size = W()});
    auto rec = std::make_shared<Recorder>(path, kSaveAt);
    std::ostringstream out;
    train::Trainer trainer(3, {rec}, {.out = &out, .distributed = dist::trainer_hooks(ddp)});
    trainer.fit(*net.task, loader);
    EXPECT_EQ(trainer.progress().global_step, 15);  // 5 global batches of 8 an epoch
    if (R() == 1) {
      EXPECT_TRUE(out.str().empty()) << out.str();  // only rank 0 prints
    }
    two_rank = rec->losses;
  }
  dist::barrier();  // the checkpoint is written
  if (R() == 0) {
    // One process, batch 8 = 2 ranks x 4, no DataParallel: the same global batches.
    Net net(99, false);
    data::DataLoader loader(set, {.batch_size = 8, .seed = 2});
    auto rec = std::make_shared<Recorder>("", -1);
    std::ostringstream out;
    train::Trainer trainer(3, {rec}, {.out = &out});
    trainer.fit(*net.task, loader, path);
    ASSERT_EQ(rec->losses.size(), two_rank.size() - size_t(kSaveAt));
    for (size_t i = 0; i < rec->losses.size(); ++i)
      EXPECT_NEAR(rec->losses[i], two_rank[size_t(kSaveAt) + i], 1e-6) << "step " << kSaveAt + 1 + int64_t(i);
    std::filesystem::remove(path);
  }
  dist::barrier();
}

// ---- sharded validation ----

// The whole set in one process: the sample-weighted mean loss and accuracy of
// task.validation_step over batches of `batch`, as one process's Validation
// has them.
std::pair<double, double> one_process_eval(train::Task& task, std::shared_ptr<data::TensorDataset> set, int64_t batch) {
  data::DataLoader loader(set, {.batch_size = batch, .shuffle = false});
  bool training = task.model().is_training();
  task.model().eval();
  NoGradGuard no_grad;
  double loss = 0, count = 0, correct = 0;
  for (const data::Batch& b : loader) {
    train::StepResult r = task.validation_step(b);
    loss += r.loss * double(r.count);
    count += double(r.count);
    correct += double(r.correct);
  }
  task.model().train(training);
  return {loss / count, correct / count};
}

TEST(TrainerDataParallel, ShardedValidationEqualsOneProcessOverTheWholeSet) {
  // 33 = 4 * 8 + 1: the last global batch of one row leaves rank 0 none.
  for (int64_t n_val : {int64_t(37), int64_t(33)}) {
    auto train_set = blobs(37);
    auto val_set = blobs(n_val, 77);
    Net net(uint64_t(5 + R()), false);
    dist::DataParallel ddp(*net.model);
    data::DataLoader loader(train_set, {.batch_size = 4, .seed = 2, .rank = R(), .world_size = W()});
    auto val_loader = std::make_shared<data::DataLoader>(
        val_set, data::DataLoaderOptions{.batch_size = 4, .shuffle = false, .rank = R(), .world_size = W()});
    auto val = std::make_shared<train::Validation>(val_loader);
    std::ostringstream out;
    train::Trainer trainer(2, {val}, {.out = &out, .distributed = dist::trainer_hooks(ddp)});
    trainer.fit(*net.task, loader);
    const train::ValidationResult& r = val->result();
    EXPECT_EQ(r.count, n_val);  // every example once, over the ranks
    // The weights are every rank's; one process over the whole set, batch 8.
    auto [loss, accuracy] = one_process_eval(*net.task, val_set, 8);
    EXPECT_NEAR(r.loss, loss, 1e-6 * std::abs(loss)) << "rank " << R() << ", " << n_val << " examples";
    EXPECT_EQ(r.accuracy, accuracy) << "rank " << R();
    EXPECT_EQ(trainer.logs().at("val/loss"), r.loss);
    // Every rank logs the same figures.
    Tensor mine = tensor(std::vector<double>{r.loss, r.accuracy});
    Tensor rank0 = mine.clone();
    dist::broadcast(rank0, 0);
    EXPECT_TRUE(same_bits({mine}, {rank0}));
  }
}

TEST(TrainerDataParallel, ValidationShardedForAnotherWorldIsAnError) {
  auto set = blobs(16);
  Net net(uint64_t(5 + R()), false);
  dist::DataParallel ddp(*net.model);
  data::DataLoader loader(set, {.batch_size = 4, .seed = 2, .rank = R(), .world_size = W()});
  // Sharded as if over 3 ranks.
  auto val_loader = std::make_shared<data::DataLoader>(
      set, data::DataLoaderOptions{.batch_size = 4, .shuffle = false, .rank = R(), .world_size = W() + 1});
  std::ostringstream out;
  train::Trainer trainer(1, {std::make_shared<train::Validation>(val_loader)},
                         {.out = &out, .distributed = dist::trainer_hooks(ddp)});
  try {
    trainer.fit(*net.task, loader);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[Validation]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("of 3"), std::string::npos) << e.what();
  }
}

// ---- per-rank random streams ----

// Dropout drawn from the task's Rngs ("dropout" stream) before the first
// layer; each step records the first value its micro-batch's generator gives.
struct DropoutNet {
  explicit DropoutNet(uint64_t seed) : rngs{{"params", seed}, {"dropout", seed + 1}}, model(nn::make<nn::Sequential>()) {
    model->push_back(nn::Linear(6, 16, rngs));
    model->push_back(nn::Tanh());
    model->push_back(nn::Linear(16, 3, rngs));
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 0.01});
    auto forward = [this](const Tensor& x) -> Tensor {
      if (!model->is_training()) return model(x);
      Generator g = rngs.next("dropout");
      Generator probe = g;
      draws.push_back(probe.next_u64());
      return model(dropout(x, 0.5, true, g));
    };
    task = std::make_unique<train::Task>(*model, forward, *opt, &rngs);
  }
  Rngs rngs;
  nn::Shared<nn::Sequential> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<train::Task> task;
  std::vector<uint64_t> draws;
};

TEST(TrainerDataParallel, EachRankDrawsItsOwnDropoutStreamAndResumesItExactly) {
  auto set = blobs(37);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kiln_dist_streams_" + std::to_string(::getppid()) + ".safetensors")).string();
  constexpr int64_t kSaveAt = 6;
  auto run = [&](const std::string& resume, std::vector<double>* losses) {
    DropoutNet net(3);
    dist::DataParallel ddp(*net.model);
    data::DataLoader loader(set, {.batch_size = 4, .seed = 2, .rank = R(), .world_size = W()});
    auto rec = std::make_shared<Recorder>(resume.empty() ? path : "", resume.empty() ? kSaveAt : -1);
    std::ostringstream out;
    train::Trainer trainer(2, {rec}, {.out = &out, .distributed = dist::trainer_hooks(ddp)});
    trainer.fit(*net.task, loader, resume);
    // fit() gives the stream its shared seed back; the count is every rank's.
    EXPECT_EQ(net.rngs.state().at("dropout").seed, 4u);
    EXPECT_EQ(net.rngs.state().at("dropout").count, 10u);  // 2 epochs x 5 steps, one draw each
    *losses = rec->losses;
    return net.draws;
  };
  std::vector<double> full_losses, resumed_losses;
  const std::vector<uint64_t> full = run("", &full_losses);
  ASSERT_EQ(full.size(), 10u);
  // Rank-distinct: rank 1's draws differ from rank 0's at every step.
  Tensor mine = tensor(std::vector<int64_t>(full.begin(), full.end()));
  const std::vector<int64_t> all = dist::all_gather(mine).to_vector<int64_t>();  // [2, 10]
  for (size_t s = 0; s < 10; ++s) EXPECT_NE(all[s], all[10 + s]) << "step " << s;
  // Rank 0 draws what one process with the same Rngs would: the shared seed.
  Rngs shared{{"dropout", 4}};
  if (R() == 0) {
    EXPECT_EQ(full[0], shared.next("dropout").next_u64());
  }
  EXPECT_EQ(train::rank_stream_seed(4, 0), 4u);
  EXPECT_NE(train::rank_stream_seed(4, 1), train::rank_stream_seed(4, 2));
  EXPECT_NE(train::rank_stream_seed(4, 1), train::rank_stream_seed(5, 1));
  dist::barrier();  // the checkpoint is written
  // Resumed at step 6 from rank 0's checkpoint: every rank's later draws and
  // the losses are the uninterrupted run's.
  const std::vector<uint64_t> resumed = run(path, &resumed_losses);
  ASSERT_EQ(resumed.size(), full.size() - size_t(kSaveAt));
  for (size_t i = 0; i < resumed.size(); ++i) EXPECT_EQ(resumed[i], full[size_t(kSaveAt) + i]) << "rank " << R();
  ASSERT_EQ(resumed_losses.size(), resumed.size());
  for (size_t i = 0; i < resumed_losses.size(); ++i)
    EXPECT_EQ(resumed_losses[i], full_losses[size_t(kSaveAt) + i]) << "rank " << R() << " step " << kSaveAt + 1 + int64_t(i);
  dist::barrier();
  if (R() == 0) std::filesystem::remove(path);
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  kiln::dist::init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  // Only rank 0 prints googletest's progress; every rank's failures still print.
  if (kiln::dist::rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  // Any rank's failure fails every rank's exit code.
  int failed = rc != 0;
  kiln::Tensor f = kiln::tensor(std::vector<int32_t>{failed});
  kiln::dist::all_reduce(f, kiln::dist::ReduceOp::Max);
  kiln::dist::finalize();
  return f.to_vector<int32_t>()[0];
}
