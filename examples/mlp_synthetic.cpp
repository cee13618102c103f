// Trains a two-layer MLP with autograd and plain SGD on synthetic data: points
// x ~ N(0, I) in 16-D labelled by a random linear teacher (4 classes).
// B = batch, I = 16 inputs, H = 64 hidden, C = 4 classes.
#include <kiln/kiln.h>

#include <chrono>
#include <cmath>
#include <cstdio>

using namespace kiln;

namespace {

// Fan-in scaled uniform init, like torch.nn.Linear: U(-1/sqrt(I), 1/sqrt(I)).
Tensor init_weight(int64_t out, int64_t in, Generator& gen) {
  double bound = 1.0 / std::sqrt(double(in));
  Tensor w = empty({out, in});
  uniform_(w, -bound, bound, gen);
  return w.requires_grad_();
}

}  // namespace

int main() {
  const int64_t N = 8192, I = 16, H = 64, C = 4, B = 64, epochs = 5;
  const double lr = 0.1;
  Rngs rngs{{"data", 0}, {"params", 1}, {"shuffle", 2}};

  Generator data_gen = rngs.next("data");
  Tensor teacher = randn({I, C}, data_gen);
  Tensor x = randn({N, I}, data_gen);
  Tensor y = argmax(matmul(x, teacher), 1);  // [N] i64

  Generator param_gen = rngs.next("params");
  Tensor w1 = init_weight(H, I, param_gen), b1 = zeros({H}, {.requires_grad = true});
  Tensor w2 = init_weight(C, H, param_gen), b2 = zeros({C}, {.requires_grad = true});
  std::vector<Tensor> params{w1, b1, w2, b2};

  Generator shuffle_gen = rngs.next("shuffle");
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    auto start = std::chrono::steady_clock::now();
    Tensor order = randperm(N, shuffle_gen);
    double loss_sum = 0;
    int64_t correct = 0, steps = 0;
    for (int64_t i = 0; i + B <= N; i += B, ++steps) {
      Tensor idx = narrow(order, 0, i, B);
      Tensor xb = index_select(x, 0, idx), yb = index_select(y, 0, idx);
      Tensor logits = linear(relu(linear(xb, w1, b1)), w2, b2);  // [B, C]
      Tensor loss = cross_entropy(logits, yb);  // kiln's fused op (kiln/ops/loss.h), mean over B
      loss.backward();
      {
        NoGradGuard no_grad;
        for (Tensor& p : params) {
          sub_(p, mul(p.grad(), lr));
          p.set_grad({});
        }
        loss_sum += loss.item<double>();
        correct += sum(eq(argmax(logits, 1), yb)).item<int64_t>();
      }
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("epoch %lld/%lld  loss %.4f  accuracy %.4f  %.2fs  %.0f sample/s\n", (long long)epoch,
                (long long)epochs, loss_sum / double(steps), double(correct) / double(steps * B), secs,
                double(steps * B) / secs);
  }
  Tensor logits = linear(relu(linear(x, w1, b1)), w2, b2);
  double acc = sum(eq(argmax(logits, 1), y)).item<double>() / double(N);
  std::printf("train accuracy %.4f\n", acc);
  return acc > 0.9 ? 0 : 1;
}
