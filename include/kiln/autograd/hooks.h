// Hooks on a leaf's gradient accumulation (PyTorch's
// Tensor.register_post_accumulate_grad_hook).
//
//   auto h = autograd::register_post_accumulate_grad_hook(w, [](const Tensor& leaf) {
//     use(leaf.grad());       // final for this backward: every consumer of w has run
//   });
//   loss.backward();          // the hook runs once, after w.grad() was accumulated
//   autograd::remove_post_accumulate_grad_hook(w, h);
//
// Hooks run on the thread running backward, in registration order, and only
// for backward() (autograd::grad() leaves grad() alone, so it runs none).
#pragma once

#include <functional>
#include <memory>

#include "kiln/core/node.h"
#include "kiln/core/tensor.h"

namespace kiln::autograd {

using PostAccumulateGradFn = std::function<void(const Tensor& leaf)>;

/// leaf: a leaf that requires grad (a parameter). Returns the hook's handle.
std::shared_ptr<PostAccumulateGradHook> register_post_accumulate_grad_hook(const Tensor& leaf,
                                                                          PostAccumulateGradFn fn);
/// Removes a hook registered on leaf (nothing when it is not there).
void remove_post_accumulate_grad_hook(const Tensor& leaf, const std::shared_ptr<PostAccumulateGradHook>& hook);

}  // namespace kiln::autograd
