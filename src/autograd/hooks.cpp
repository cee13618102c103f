#include "kiln/autograd/hooks.h"

#include <algorithm>

#include "kiln/core/error.h"

namespace kiln::autograd {

namespace {

class FnHook final : public PostAccumulateGradHook {
 public:
  explicit FnHook(PostAccumulateGradFn fn) : fn_(std::move(fn)) {}
  void operator()(const Tensor& leaf) override { fn_(leaf); }

 private:
  PostAccumulateGradFn fn_;
};

}  // namespace

std::shared_ptr<PostAccumulateGradHook> register_post_accumulate_grad_hook(const Tensor& leaf,
                                                                          PostAccumulateGradFn fn) {
  constexpr const char* op = "register_post_accumulate_grad_hook";
  KILN_CHECK(leaf.defined(), op, "the tensor is undefined");
  KILN_CHECK(leaf.requires_grad() && leaf.is_leaf(), op,
             "the tensor of shape {} must be a leaf that requires grad (a parameter)", to_string(leaf.shape()));
  KILN_CHECK(fn != nullptr, op, "the hook is empty");
  auto hook = std::make_shared<FnHook>(std::move(fn));
  leaf.impl()->autograd->post_accumulate_grad_hooks.push_back(hook);
  return hook;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, const std::shared_ptr<PostAccumulateGradHook>& hook) {
  if (!leaf.defined() || !leaf.impl()->autograd) return;
  auto& hooks = leaf.impl()->autograd->post_accumulate_grad_hooks;
  hooks.erase(std::remove(hooks.begin(), hooks.end(), hook), hooks.end());
}

}  // namespace kiln::autograd
