// Convolution and pooling benches: one training step's worth of work per
// iteration (forward, then backward into the input, weight and bias), f32,
// the same shapes as bench/torch_conv.py.
#include <string>
#include <vector>

#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

// x [B, C, H, W] -> conv2d 3x3, pad 1, with bias -> O channels; y.backward(g)
// so every iteration runs forward, backward-data, backward-weights and the
// bias sum. With `fresh`, x, w and g are rewritten in place (x *= 1) before
// each step, as a new batch and an optimizer step would: no reordered copy
// of them can be reused (NOTE [Reordered inputs] in src/backend/cpu/linalg/conv.cpp).
void bench_conv2d(const std::string& name, int64_t B, int64_t C, int64_t H, int64_t W, int64_t O, bool fresh) {
  kiln::Generator gen(0);
  kiln::Tensor x = kiln::randn({B, C, H, W}, gen).requires_grad_();
  kiln::Tensor w = kiln::mul(kiln::randn({O, C, 3, 3}, gen), 0.1).requires_grad_();
  kiln::Tensor b = kiln::zeros({O}).requires_grad_();
  kiln::Tensor g = kiln::randn({B, O, H, W}, gen);
  double sec = seconds_per_call(
      [&] {
        if (fresh) {
          kiln::NoGradGuard no_grad;
          kiln::mul_(x, 1.0), kiln::mul_(w, 1.0), kiln::mul_(g, 1.0);
        }
        kiln::Tensor y = kiln::conv2d(x, w, b, 1, 1);
        y.backward(g);
        x.set_grad({}), w.set_grad({}), b.set_grad({});
      },
      0.3);
  emit(name, "time", "ms/iter", sec * 1e3);
}

void bench_max_pool2d(const std::string& name) {
  kiln::Generator gen(1);
  kiln::Tensor x = kiln::randn({64, 32, 28, 28}, gen).requires_grad_();
  kiln::Tensor g = kiln::randn({64, 32, 14, 14}, gen);
  double sec = seconds_per_call(
      [&] {
        kiln::Tensor y = kiln::max_pool2d(x, 2);
        y.backward(g);
        x.set_grad({});
      },
      0.3);
  emit(name, "time", "ms/iter", sec * 1e3);
}

}  // namespace

void conv_benches(std::vector<Bench>& out) {
  out.push_back({"conv2d_cnn1", [](const std::string& n) { bench_conv2d(n, 64, 1, 28, 28, 32, false); }});
  out.push_back({"conv2d_cnn2", [](const std::string& n) { bench_conv2d(n, 64, 32, 14, 14, 64, false); }});
  out.push_back({"conv2d_cnn1_fresh", [](const std::string& n) { bench_conv2d(n, 64, 1, 28, 28, 32, true); }});
  out.push_back({"conv2d_cnn2_fresh", [](const std::string& n) { bench_conv2d(n, 64, 32, 14, 14, 64, true); }});
  out.push_back({"max_pool2d_64x32x28x28", [](const std::string& n) { bench_max_pool2d(n); }});
}

}  // namespace bench
