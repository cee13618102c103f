#include "kiln/train/steps.h"

#include <bit>
#include <cmath>
#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/reduce.h"
#include "kiln/optim/optimizer.h"
#include "kiln/train/distributed.h"
#include "kiln/train/metrics.h"

namespace kiln::train {

namespace {

// Whether every value of `t` is finite. Called on every gradient of every
// step, so the common case (contiguous f32) is one pass over the bits with no
// op dispatch or allocation: an exponent of all ones is inf or NaN, and the
// integer OR-reduction vectorises (a float one would not, without
// -ffast-math).
bool all_finite(const Tensor& t) {
  if (t.dtype() != kF32 || !t.is_contiguous()) return all(isfinite(t)).item<bool>();
  const float* x = t.data<float>();
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t bad = 0;
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    bad |= uint32_t((std::bit_cast<uint32_t>(x[i]) & kExponent) == kExponent);
  return bad == 0;
}

}  // namespace

bool grads_finite(const optim::Optimizer& opt) {
  for (size_t g = 0; g < opt.num_groups(); ++g)
    for (const nn::Parameter& p : opt.params(g)) {
      Tensor grad = p.grad();
      if (grad.defined() && !all_finite(grad)) return false;
    }
  return true;
}

bool update(const Tensor& loss, optim::Optimizer& opt) {
  if (!std::isfinite(loss.item<double>())) {
    opt.zero_grad();
    return false;
  }
  loss.backward();
  // A finite but huge loss can still overflow its gradients to inf, which
  // Adam's moments would turn into NaN parameters.
  if (!grads_finite(opt)) {
    opt.zero_grad();
    return false;
  }
  opt.step();
  opt.zero_grad();
  return true;
}

StepResult accumulation_step(Task& task, std::span<const data::Batch> micro_batches,
                             DistributedHooks* distributed) {
  constexpr const char* op = "accumulation_step";
  KILN_CHECK(!micro_batches.empty(), op, "no micro-batches");
  optim::Optimizer& opt = task.optimizer();
  // The global count first: every micro-batch's loss is divided by it, so
  // that the summed gradients are those of the whole step's mean.
  double count = 0;
  for (const data::Batch& b : micro_batches) {
    const int64_t n = task.valid_count(b);
    KILN_CHECK(n >= 0, op, "valid_count returned {} for a batch of {}", n, b.size());
    count += double(n);
  }
  if (distributed) distributed->all_reduce_sum(std::span<double>(&count, 1));
  // No valid item anywhere: the gradient is 0 (masked_cross_entropy's rule);
  // dividing by 1 keeps it so instead of 0/0.
  const double divisor = count > 0 ? count : 1.0;

  double loss_sum = 0, correct = 0;
  bool classified = true;
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const bool last = i + 1 == micro_batches.size();
    if (distributed) distributed->set_gradient_sync(last);
    LossSum l = task.loss_sum(micro_batches[i]);
    KILN_CHECK(l.sum.defined() && l.sum.numel() == 1, op, "loss_sum must return a one-element loss, got shape {}",
               l.sum.defined() ? to_string(l.sum.shape()) : std::string("undefined"));
    loss_sum += l.sum.item<double>();
    if (l.correct >= 0) correct += double(l.correct);
    else classified = false;
    // Always backward, even for a non-finite loss: every rank must take part
    // in the gradient reduction, and the NaN reaches every rank's gradients,
    // so that all of them skip the update together.
    div(l.sum, divisor).backward();
  }
  if (distributed) distributed->finish_gradient_sync();
  double sums[2] = {loss_sum, correct};
  if (distributed) distributed->all_reduce_sum(sums);
  const double loss = sums[0] / divisor;
  const bool applied = std::isfinite(loss) && task.prepare_step();
  if (applied) opt.step();
  opt.zero_grad();
  return {loss, int64_t(count), classified ? int64_t(sums[1]) : -1, applied};
}

namespace {

// Logits [B, 1] f32 (checked by the caller) above or below 0.
int64_t count_positive(const Tensor& logits, bool positive) {
  Tensor l = logits.contiguous();
  const float* p = l.data<float>();
  int64_t n = 0;
  for (int64_t i = 0; i < l.numel(); ++i) n += positive ? p[i] > 0 : p[i] < 0;
  return n;
}

}  // namespace

StepResult classification_step(const Forward& forward, optim::Optimizer& opt, const data::Batch& batch) {
  Tensor logits = forward(batch.input);  // [B, C]
  Tensor loss = cross_entropy(logits, batch.target);
  const bool applied = update(loss, opt);
  // The predictions before the update, as Keras reports training accuracy.
  return {loss.item<double>(), batch.size(), count_correct(logits.detach(), batch.target), applied};
}

StepResult classification_eval(const Forward& forward, const data::Batch& batch) {
  NoGradGuard no_grad;
  Tensor logits = forward(batch.input);
  return {cross_entropy(logits, batch.target).item<double>(), batch.size(), count_correct(logits, batch.target)};
}

StepResult regression_step(const Forward& forward, optim::Optimizer& opt, const data::Batch& batch) {
  Tensor loss = mse_loss(forward(batch.input), batch.target);
  const bool applied = update(loss, opt);
  return {loss.item<double>(), batch.size(), -1, applied};
}

StepResult regression_eval(const Forward& forward, const data::Batch& batch) {
  NoGradGuard no_grad;
  return {mse_loss(forward(batch.input), batch.target).item<double>(), batch.size()};
}

StepResult autoencoder_step(const Forward& forward, optim::Optimizer& opt, const data::Batch& batch) {
  Tensor loss = mse_loss(forward(batch.input), batch.input);
  const bool applied = update(loss, opt);
  return {loss.item<double>(), batch.size(), -1, applied};
}

StepResult autoencoder_eval(const Forward& forward, const data::Batch& batch) {
  NoGradGuard no_grad;
  return {mse_loss(forward(batch.input), batch.input).item<double>(), batch.size()};
}

StepResult gan_discriminator_step(const Forward& generator, const Forward& discriminator, optim::Optimizer& d_opt,
                                  const Tensor& real, const Tensor& noise) {
  Tensor fake = generator(noise).detach();  // no gradient reaches the generator
  Tensor real_logits = discriminator(real), fake_logits = discriminator(fake);  // [B, 1]
  // Checked before the update: an error leaves the discriminator as it was.
  KILN_CHECK(real_logits.dtype() == kF32 && fake_logits.dtype() == kF32, "gan_discriminator_step",
             "discriminator logits must be f32, got {}", name(real_logits.dtype()));
  Tensor loss = add(binary_cross_entropy_with_logits(real_logits, ones_like(real_logits)),
                    binary_cross_entropy_with_logits(fake_logits, zeros_like(fake_logits)));
  const bool applied = update(loss, d_opt);
  int64_t correct = count_positive(real_logits.detach(), true) + count_positive(fake_logits.detach(), false);
  return {loss.item<double>(), real.size(0) + noise.size(0), correct, applied};
}

StepResult gan_generator_step(const Forward& generator, const Forward& discriminator, optim::Optimizer& g_opt,
                              nn::Module& discriminator_module, const Tensor& noise) {
  Tensor fake_logits = discriminator(generator(noise));
  Tensor loss = binary_cross_entropy_with_logits(fake_logits, ones_like(fake_logits));
  const bool applied = update(loss, g_opt);
  discriminator_module.zero_grad();  // the discriminator's gradients of this phase are not applied
  return {loss.item<double>(), noise.size(0), -1, applied};
}

}  // namespace kiln::train
