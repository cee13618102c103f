// Reference steps (T2): readable training and validation steps for the common
// objectives, each a few lines of the public API. A Task's training_step calls
// one; a custom objective writes its own the same way. Training steps run
// forward, backward, optimizer.step() and zero_grad(); eval steps run under
// NoGradGuard and update nothing.
//
// CNN with dropout is classification_step with the model in train mode: each
// Dropout draws its masks from its own checkpointed generator, so the step
// needs no key argument (spec 000 passes one in JAX style).
#pragma once

#include "kiln/train/task.h"

namespace kiln::train {

/// The tail of every training step: loss.backward(), opt.step(), opt.zero_grad().
/// A NaN or infinite loss, or gradient, is not applied (as mixed-precision
/// grad scalers skip an overflowed step): the gradients are cleared and false
/// returned, so that the Trainer can stop the run or skip the step
/// (RunOptions::on_nan, StepResult::applied) with the parameters intact.
bool update(const Tensor& loss, optim::Optimizer& opt);

/// Whether every gradient `opt` would apply is finite (undefined ones are skipped).
bool grads_finite(const optim::Optimizer& opt);

/// One optimizer step over micro-batches (gradient accumulation, SPECS X6):
/// the global count G of valid items (task.valid_count over every
/// micro-batch, summed over the ranks of `distributed` when given) first;
/// then for each micro-batch backward of task.loss_sum(b).sum / G, the
/// gradients summed across ranks only on the last one (no_sync before); then
/// task.prepare_step() and the optimizer step, and zero_grad. The gradient is
/// that of (sum of every item's loss) / G: one process over the combined
/// batch gives the same up to summation order, and 2 ranks give bit for bit
/// what one process accumulating their two micro-batches gives. loss, count
/// and correct are the whole step's, over every rank. A non-finite loss or
/// gradient on any rank skips the update on every rank (applied false).
StepResult accumulation_step(Task& task, std::span<const data::Batch> micro_batches,
                             DistributedHooks* distributed = nullptr);

/// Cross entropy of forward(input) [B, C] against target [B] (class indices).
StepResult classification_step(const Forward& forward, optim::Optimizer& opt, const data::Batch& batch);
StepResult classification_eval(const Forward& forward, const data::Batch& batch);

/// Forecasting / regression: mean squared error of forward(input) against target (same shape).
StepResult regression_step(const Forward& forward, optim::Optimizer& opt, const data::Batch& batch);
StepResult regression_eval(const Forward& forward, const data::Batch& batch);

/// Autoencoding: mean squared error of forward(input) against the input itself.
StepResult autoencoder_step(const Forward& forward, optim::Optimizer& opt, const data::Batch& batch);
StepResult autoencoder_eval(const Forward& forward, const data::Batch& batch);

/// GAN discriminator phase: BCE-with-logits of discriminator(real) against 1
/// and of discriminator(generator(noise)) against 0 (the fakes detached, so
/// the generator gets no gradient); steps d_opt. loss = the sum of the two
/// means; correct = real scored > 0 plus fakes scored < 0, out of count = 2B.
StepResult gan_discriminator_step(const Forward& generator, const Forward& discriminator,
                                  optim::Optimizer& d_opt, const Tensor& real, const Tensor& noise);
/// GAN generator phase (non-saturating): BCE-with-logits of
/// discriminator(generator(noise)) against 1; steps g_opt only (the
/// discriminator's gradients are cleared, not applied).
StepResult gan_generator_step(const Forward& generator, const Forward& discriminator, optim::Optimizer& g_opt,
                              nn::Module& discriminator_module, const Tensor& noise);

}  // namespace kiln::train
