// The device layer of a build without a GPU backend (NOTE [Backend dispatch]
// in src/backend/backend.h): creating a cuda tensor, moving one there, or
// handing one to an op is an Error naming the op, thrown before any kernel or
// allocation; CPU tensors are untouched; for_each_device visits the CPU.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/backend/backend.h"
#include "src/backend/gpu.h"
#include "tests/support/ops_devices.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

constexpr const char* kNoGpu = "this build has no GPU backend";

// What a GPU build's tensor would look like to this one: host memory (kept
// alive by `host`) whose storage claims `device`. Ops must refuse it by its
// device alone; none may read or write the memory.
Tensor claimed_on(const Tensor& host, Device device) {
  auto storage = std::make_shared<Storage>(host.data_ptr(), size_t(host.nbytes()), device, nullptr, nullptr);
  return Tensor::make_view(storage, host.shape(), host.strides(), 0, host.dtype());
}

TEST(NoGpu, TheBuildHasOnlyTheCpu) {
  EXPECT_FALSE(backend::gpu::is_built());
  ASSERT_EQ(available_devices().size(), 1u);
  EXPECT_EQ(available_devices()[0], kCPU);
  std::vector<Device> seen;
  for_each_device([&](Device d) { seen.push_back(d); });
  EXPECT_EQ(seen, available_devices());
}

TEST(NoGpu, CreatingACudaTensorNamesTheOp) {
  Generator gen(1);
  const TensorOptions cuda{.device = kCUDA};
  EXPECT_KILN_ERROR(zeros({2, 3}, cuda), std::string("[zeros] ") + kNoGpu + ": cuda:0 tensors cannot be created");
  EXPECT_KILN_ERROR(empty({2}, cuda), std::string("[empty] ") + kNoGpu);
  EXPECT_KILN_ERROR(full({2}, 1.5, cuda), std::string("[full] ") + kNoGpu);
  EXPECT_KILN_ERROR(ones({2}, {.device = Device{DeviceType::cuda, 3}}), "cuda:3 tensors");
  EXPECT_KILN_ERROR(arange(0, 4, 1, {.dtype = kI64, .device = kCUDA}), std::string("[arange] ") + kNoGpu);
  EXPECT_KILN_ERROR(randn({4}, gen, cuda), std::string("[randn] ") + kNoGpu);
  EXPECT_KILN_ERROR(rand({4}, gen, cuda), std::string("[rand] ") + kNoGpu);
  EXPECT_KILN_ERROR(Tensor::empty({2}, kF32, kCUDA), std::string("[empty] ") + kNoGpu);
  // A refused request draws nothing from the generator and holds no memory.
  EXPECT_EQ(gen.state(), Generator(1).state());
}

TEST(NoGpu, MovingATensorToCudaNamesTheOp) {
  Tensor x = tensor({1.0f, 2.0f, 3.0f});
  EXPECT_KILN_ERROR(to(x, kCUDA), std::string("[to] ") + kNoGpu + ": cuda:0 tensors cannot be created, moved to");
  EXPECT_KILN_ERROR(to(x, Device{DeviceType::cuda, 1}), "cuda:1");
  // And back: a tensor claiming cuda is refused by `to` too.
  Tensor host = tensor({1.0f, 2.0f});
  EXPECT_KILN_ERROR(to(claimed_on(host, kCUDA), kCPU), std::string("[to] ") + kNoGpu);
  // To its own device a tensor moves as itself (no copy, same graph node).
  Tensor w = tensor({1.0, 2.0});
  w.requires_grad_();
  Tensor same = to(w, kCPU);
  EXPECT_TRUE(same.is_same(w));
  EXPECT_EQ(same.device(), kCPU);
}

// Every family of op, given one cuda operand (the other operands on the CPU),
// refuses with its own name before any kernel runs.
TEST(NoGpu, OpsReceivingACudaTensorNameTheOp) {
  Generator gen(3);
  Tensor hx = tensor({1.0f, -2.0f, 3.0f, 0.5f, 2.0f, -1.0f}, {2, 3});
  Tensor hi = tensor(std::vector<int64_t>{0, 2});
  Tensor himg = zeros({1, 1, 4, 4});
  Tensor hq = zeros({1, 2, 3, 4});
  Tensor hb = zeros({2}), hw = ones({3});
  Tensor x = claimed_on(hx, kCUDA), idx = claimed_on(hi, kCUDA), img = claimed_on(himg, kCUDA);
  Tensor q = claimed_on(hq, kCUDA);
  Tensor cpu = ones({2, 3});
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"add", [&] { add(x, cpu); }},
      {"add", [&] { add(cpu, x); }},
      {"mul", [&] { mul(x, 2.0); }},
      {"add_", [&] { add_(x, cpu); }},
      {"exp", [&] { exp(x); }},
      {"relu", [&] { relu(x); }},
      {"clamp", [&] { clamp(x, -1.0, 1.0); }},
      {"where", [&] { where(gt(cpu, 0.0), x, cpu); }},
      {"sum", [&] { sum(x); }},
      {"mean", [&] { mean(x, {1}); }},
      {"amax", [&] { amax(x, {1}); }},
      {"argmax", [&] { argmax(x, 1); }},
      {"cumsum", [&] { cumsum(x, 1); }},
      {"softmax", [&] { softmax(x, 1); }},
      {"log_softmax", [&] { log_softmax(x, 1); }},
      {"matmul", [&] { matmul(x, cpu.t()); }},
      {"matmul", [&] { matmul(cpu.t(), x); }},
      {"linear", [&] { linear(x, cpu); }},
      {"linear", [&] { linear(cpu, cpu, claimed_on(hb, kCUDA)); }},
      {"layer_norm", [&] { layer_norm(x, {3}); }},
      {"layer_norm", [&] { layer_norm(cpu, {3}, claimed_on(hw, kCUDA)); }},
      {"conv2d", [&] { conv2d(img, ones({1, 1, 3, 3})); }},
      {"max_pool2d", [&] { max_pool2d(img, 2, 2); }},
      {"avg_pool2d", [&] { avg_pool2d(img, 2, 2); }},
      {"cross_entropy", [&] { cross_entropy(x, tensor(std::vector<int64_t>{0, 1})); }},
      {"mse_loss", [&] { mse_loss(x, cpu); }},
      {"index_select", [&] { index_select(cpu, 1, idx); }},
      {"gather", [&] { gather(x, 1, zeros({2, 1}, {.dtype = kI64})); }},
      {"embedding", [&] { embedding(x, tensor(std::vector<int64_t>{1})); }},
      {"cat", [&] { cat({cpu, x}); }},
      {"sort", [&] { sort(x); }},
      {"tril", [&] { tril(x); }},
      {"one_hot", [&] { one_hot(idx, 3); }},
      {"clone", [&] { clone(x); }},
      {"to", [&] { to(x, kF64); }},
      {"copy_", [&] { copy_(cpu, x); }},
      {"uniform_", [&] { uniform_(x, 0.0, 1.0, gen); }},
      {"bernoulli", [&] { bernoulli(x, gen); }},
      {"dropout", [&] { dropout(x, 0.5, true, gen); }},
      {"scaled_dot_product_attention", [&] { (void)scaled_dot_product_attention(q, q, q); }},
  };
  for (const auto& [op, call] : cases) {
    SCOPED_TRACE(op);
    EXPECT_KILN_ERROR(call(), "[" + op + "] " + kNoGpu);
  }
  // Nothing was written through the claimed tensors.
  EXPECT_TRUE(equal(hx, tensor({1.0f, -2.0f, 3.0f, 0.5f, 2.0f, -1.0f}, {2, 3})));
  EXPECT_EQ(gen.state(), Generator(3).state());
}

TEST(NoGpu, DeviceOfSkipsUndefinedAndRefusesCuda) {
  Tensor a = ones({2}), b = zeros({2});
  EXPECT_EQ(backend::device_of("op", a, b, Tensor()), kCPU);
  EXPECT_EQ(backend::device_of("op", Tensor()), kCPU);
  Tensor h = ones({2});
  EXPECT_KILN_ERROR(backend::device_of("my_op", claimed_on(h, kCUDA)), std::string("[my_op] ") + kNoGpu);
  // Without a GPU backend the missing backend is the error, not the mix.
  EXPECT_KILN_ERROR(backend::device_of("my_op", a, Tensor(), claimed_on(h, kCUDA)), std::string("[my_op] ") + kNoGpu);
}

}  // namespace
}  // namespace kiln
