// No memory growth over 10,000 training-shaped steps: forward, backward and a
// NoGradGuard update must give every byte back, and after a warm-up the
// caching allocator must serve every request without calling malloc. (Here
// rather than in tests/core because it needs the backward engine.)
#include "tests/support/autograd_testing.h"

namespace kiln {
namespace {

// B = batch 64, I = 32 inputs, H = 64 hidden units, one output.
struct TinyMlp {
  Tensor w1, b1, w2;
  explicit TinyMlp(Generator& g)
      : w1(mul(randn({32, 64}, g), 0.1).requires_grad_()),
        b1(zeros({64}).requires_grad_()),
        w2(mul(randn({64, 1}, g), 0.1).requires_grad_()) {}

  // One SGD step on mean squared error; returns the loss.
  float step(const Tensor& x, const Tensor& y) {
    Tensor h = relu(add(matmul(x, w1), b1));  // [B, H]
    Tensor err = sub(matmul(h, w2), y);       // [B, 1]
    Tensor loss = mean(mul(err, err));
    loss.backward();
    {
      NoGradGuard no_grad;
      for (Tensor* p : {&w1, &b1, &w2}) {
        sub_(*p, mul(p->grad(), 0.05));
        p->set_grad({});  // zero_grad(set_to_none)
      }
    }
    return loss.item<float>();
  }
};

TEST(Memory, NoGrowthOverTenThousandTrainingSteps) {
  Generator g(0);
  TinyMlp net(g);
  Tensor x = randn({64, 32}, g);
  Tensor y = sum(mul(x, 0.2), {1}, /*keepdim=*/true);  // a learnable target

  float first = 0;
  for (int i = 0; i < 20; ++i) first = i == 0 ? net.step(x, y) : (net.step(x, y), first);
  MemoryStats base = memory_stats();
  reset_peak_memory_stats();
  net.step(x, y);
  const int64_t step_peak = memory_stats().peak_bytes;
  EXPECT_GT(step_peak, base.current_bytes);  // a step does allocate

  float last = 0;
  for (int i = 0; i < 10000; ++i) {
    last = net.step(x, y);
    if (i % 1000 == 0) {
      MemoryStats s = memory_stats();
      ASSERT_EQ(s.current_bytes, base.current_bytes) << "step " << i;
      ASSERT_EQ(s.peak_bytes, step_peak) << "step " << i;
    }
  }
  MemoryStats end = memory_stats();
  EXPECT_EQ(end.current_bytes, base.current_bytes);  // back to the baseline
  EXPECT_EQ(end.peak_bytes, step_peak);              // flat after warm-up
  EXPECT_EQ(end.malloc_count, base.malloc_count);    // every block came from the cache
  EXPECT_GT(end.alloc_count - base.alloc_count, 10000 * 10);
  EXPECT_LT(last, first * 0.5f);  // and it did train
}

// backward(create_graph) gives the leaf a grad whose graph ends in the leaf's
// own accumulator; that must not keep either alive (PyTorch leaks here).
TEST(Memory, CreateGraphBackwardFreesLeafAndItsGrad) {
  const int64_t base = memory_stats().current_bytes;
  std::weak_ptr<TensorImpl> leaf_impl, grad_impl;
  {
    Generator g(3);
    Tensor z = randn({1000}, g, {.dtype = kF64}).requires_grad_();
    sum(mul(mul(z, z), z)).backward({}, /*retain_graph=*/false, /*create_graph=*/true);
    ASSERT_TRUE(z.grad().requires_grad());
    leaf_impl = z.impl_ptr();
    grad_impl = z.grad().impl_ptr();
  }
  EXPECT_TRUE(leaf_impl.expired());
  EXPECT_TRUE(grad_impl.expired());
  EXPECT_EQ(memory_stats().current_bytes, base);
}

}  // namespace
}  // namespace kiln
