// Benches for normalisation and losses (bench/run): forward + backward per
// iteration in f32, the same shapes as bench/torch_norm.py.
//   layer_norm_768x128          x [768, 128] over 128, weight and bias
//   cross_entropy_768x65        logits [768, 65], i64 targets, mean
//   batch_norm_64x32x14x14      x [64, 32, 14, 14] training, running buffers, weight and bias
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

// Clears the leaves' grads so every iteration does the same work (no accumulation).
void clear(std::initializer_list<kiln::Tensor> leaves) {
  for (const kiln::Tensor& t : leaves) t.set_grad({});
}

void bench_layer_norm(const std::string& name) {
  kiln::Generator gen(0);
  kiln::Tensor x = kiln::randn({768, 128}, gen).requires_grad_(), w = kiln::randn({128}, gen).requires_grad_(),
               b = kiln::randn({128}, gen).requires_grad_(), g = kiln::randn({768, 128}, gen);
  double sec = seconds_per_call(
      [&] {
        kiln::layer_norm(x, {128}, w, b).backward(g);
        clear({x, w, b});
      },
      0.2);
  emit(name, "time", "us/iter", sec * 1e6);
}

void bench_cross_entropy(const std::string& name) {
  kiln::Generator gen(1);
  kiln::Tensor x = kiln::randn({768, 65}, gen).requires_grad_(), t = kiln::randint(0, 65, {768}, gen);
  double sec = seconds_per_call(
      [&] {
        kiln::cross_entropy(x, t).backward();
        clear({x});
      },
      0.2);
  emit(name, "time", "us/iter", sec * 1e6);
}

void bench_batch_norm(const std::string& name) {
  kiln::Generator gen(2);
  kiln::Tensor x = kiln::randn({64, 32, 14, 14}, gen).requires_grad_(), g = kiln::randn({64, 32, 14, 14}, gen);
  kiln::Tensor w = kiln::ones({32}).requires_grad_(), b = kiln::zeros({32}).requires_grad_();
  kiln::Tensor rm = kiln::zeros({32}), rv = kiln::ones({32});
  double sec = seconds_per_call(
      [&] {
        kiln::batch_norm(x, rm, rv, w, b, /*training=*/true).backward(g);
        clear({x, w, b});
      },
      0.2);
  emit(name, "time", "us/iter", sec * 1e6);
}

}  // namespace

void norm_benches(std::vector<Bench>& out) {
  out.push_back({"layer_norm_768x128", bench_layer_norm});
  out.push_back({"cross_entropy_768x65", bench_cross_entropy});
  out.push_back({"batch_norm_64x32x14x14", bench_batch_norm});
}

}  // namespace bench
