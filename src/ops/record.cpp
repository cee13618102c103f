// Recording ops on the autograd tape.
#include "kiln/ops/record.h"

#include "kiln/core/replay.h"

#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"

namespace kiln {

bool needs_grad(std::span<const Tensor> ts) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& m = *t.impl()->autograd;
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m.grad_accumulator = acc;
  }
  return {std::move(acc), 0};
}

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : Node("accumulate_grad"), leaf_(leaf) {
  outputs().push_back({leaf->shape, leaf->dtype});
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  std::shared_ptr<TensorImpl> alive = leaf_.lock();
  if (!alive) return {};
  Tensor leaf(std::move(alive));
  Tensor g = std::move(grads[0]);
  Tensor old = leaf.grad();
  if (!old.defined()) {
    // Keep the incoming tensor when nobody else holds it; otherwise copy, so
    // that an in-place update of one leaf's grad never changes another's.
    if (GradMode::is_enabled()) leaf.set_grad(g);
    else if (g.impl_ptr().use_count() == 1 && !g.is_view() && g.is_contiguous()) leaf.set_grad(g.detach());
    else {
      // While recording, the recorded launches hold g too, so this copies
      // where eager would keep g; note_copy lets CompiledStep's copy elision
      // undo the copy when nothing else reaches g (docs/compile.md).
      Tensor c = g.clone();
      replay::note_copy(g, c);
      leaf.set_grad(c);
    }
  } else if (!GradMode::is_enabled() && replay::active()) {
    // Recorded (NOTE [Recorded launches]) as one launch that adds into
    // whatever grad() holds at replay: with gradients accumulated over
    // several calls, the recorded `old` is not the live one.
    std::shared_ptr<TensorImpl> impl = leaf.impl_ptr();
    Tensor gd = g.detach();
    replay::launch("AccumulateGrad", [impl, gd] {
      Tensor l(impl);
      l.set_grad(add(l.grad().detach(), gd));
    });
  } else {
    leaf.set_grad(GradMode::is_enabled() ? add(old, g) : add(old.detach(), g.detach()));
  }
  // A copy of the list: a hook may register or remove hooks.
  if (AutogradMeta* m = leaf.impl()->autograd.get(); m && !m->post_accumulate_grad_hooks.empty()) {
    auto hooks = m->post_accumulate_grad_hooks;
    for (auto& hook : hooks) (*hook)(leaf);
  }
  return {};
}

namespace detail {

void SavedTensors::save(std::span<const Tensor> saved, std::span<const Tensor> outputs) {
  items_.reserve(saved.size());
  for (const Tensor& s : saved) {
    Item item;
    if (s.defined()) {
      item.version = s.storage()->version();
      for (size_t j = 0; j < outputs.size(); ++j)
        if (s.is_same(outputs[j])) item.output_nr = int(j);
      // An output holds its node; keeping the output itself would be a
      // cycle. So would a leaf that requires grad: with create_graph its
      // grad() holds this node. Both are kept as detached aliases and
      // re-linked to the graph on unpack.
      if (item.output_nr < 0 && s.requires_grad() && s.is_leaf())
        item.leaf_accumulator = gradient_edge(s).fn;
      item.data = item.output_nr >= 0 || item.leaf_accumulator ? s.detach() : s;
    }
    items_.push_back(std::move(item));
  }
}

std::vector<Tensor> SavedTensors::unpack(const std::shared_ptr<Node>& self, const char* op) const {
  std::vector<Tensor> out;
  out.reserve(items_.size());
  for (const Item& item : items_) {
    if (item.data.defined())
      KILN_CHECK(item.data.storage()->version() == item.version, "backward",
                 "a tensor of shape {} saved by '{}' was modified in place after it was saved "
                 "(version {}, expected {}); clone() it before the in-place op",
                 to_string(item.data.shape()), op, item.data.storage()->version(), item.version);
    if ((item.output_nr >= 0 || item.leaf_accumulator) && GradMode::is_enabled()) {
      // create_graph: re-link the saved output to this node, and a saved
      // leaf to its accumulator, so higher-order gradients flow through it.
      Tensor t = item.data.detach();
      AutogradMeta& m = t.impl()->autograd_meta();
      m.requires_grad = true;
      m.grad_fn = item.leaf_accumulator ? item.leaf_accumulator : self;
      m.output_nr = item.leaf_accumulator ? 0 : uint32_t(item.output_nr);
      out.push_back(std::move(t));
    } else {
      out.push_back(item.data);
    }
  }
  return out;
}

std::vector<Tensor> FunctionNodeBase::apply(std::vector<Tensor>&& grads) {
  KILN_CHECK(!released_, "backward",
             "the graph through '{}' was already freed by an earlier backward; pass retain_graph=true "
             "to backward twice",
             name());
  std::vector<Tensor> saved = saved_.unpack(shared_from_this(), name());
  VjpArgs args{grads, saved, next_edges()};
  Grads out = vjp(args);
  KILN_CHECK(out.size() == next_edges().size(), "backward", "vjp of '{}' returned {} gradients for {} inputs",
             name(), out.size(), next_edges().size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (!next_edges()[i].valid()) {
      out[i] = Tensor();
      continue;
    }
    KILN_CHECK(out[i].defined(), "backward", "vjp of '{}' returned no gradient for input {}", name(), i);
    const OutputInfo& want = next_edges()[i].fn->outputs()[next_edges()[i].output_nr];
    KILN_CHECK(out[i].shape() == want.shape, "backward",
               "vjp of '{}' returned a gradient of shape {} for input {} of shape {}", name(),
               to_string(out[i].shape()), i, to_string(want.shape));
  }
  return out;
}

void attach(const std::shared_ptr<FunctionNodeBase>& node, std::span<const Tensor> inputs,
            std::span<const Tensor> outputs, std::span<const Tensor> saved) {
  // Edges first: an in-place op's input is also its output, and its edge must
  // point at the node that produced the old value.
  node->next_edges().reserve(inputs.size());
  for (const Tensor& in : inputs) node->next_edges().push_back(gradient_edge(in));
  node->saved().save(saved, outputs);
  node->outputs().reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    node->outputs().push_back({out.shape(), out.dtype()});
    if (!is_floating(out.dtype())) continue;  // indices, masks: never differentiable
    AutogradMeta& m = out.impl()->autograd_meta();
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = uint32_t(i);
    m.retains_grad = false;
  }
}

}  // namespace detail

void check_inplace(const char* op, const Tensor& self, bool others_require_grad) {
  if (!GradMode::is_enabled()) return;
  KILN_CHECK(!(self.requires_grad() && self.is_leaf()), op,
             "a leaf tensor of shape {} that requires grad cannot be modified in place; "
             "use NoGradGuard for parameter updates",
             to_string(self.shape()));
  KILN_CHECK(!(self.is_view() && (self.requires_grad() || others_require_grad)), op,
             "in-place write into a view of shape {} that takes part in autograd is not supported; "
             "clone() it first",
             to_string(self.shape()));
}

}  // namespace kiln
