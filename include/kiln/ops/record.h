// How an op records itself on the autograd tape. An op computes its outputs,
// then, only when needs_grad(...) holds, records a node that names the op,
// keeps what its backward needs and gives the vector-Jacobian product:
//
//   Tensor exp(const Tensor& x) {
//     Tensor out = ...forward...;
//     if (needs_grad(x))
//       record("exp", {x}, {out}, {out}, [](const VjpArgs& a) -> Grads { return {a.grad() * a.saved[0]}; });
//     return out;
//   }
//
// The vjp is written with differentiable ops, so create_graph gives higher
// derivatives for free. Saved tensors are checked against in-place changes
// (NOTE [Version counter] in core/storage.h); saved outputs are held without
// a reference cycle.
#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/core/tensor.h"

namespace kiln {

using Grads = std::vector<Tensor>;

/// What a vjp sees.
struct VjpArgs {
  std::span<const Tensor> grads;   // one per output (zero-filled where none arrived)
  std::span<const Tensor> saved;   // as passed to record()
  std::span<const Edge> inputs;    // one per input; inputs[i].valid() iff input i needs a gradient
  const Tensor& grad() const { return grads[0]; }
  bool needs(size_t i) const { return inputs[i].valid(); }
};

/// True when grad mode is on and any argument requires grad.
template <class... Ts>
bool needs_grad(const Ts&... ts) {
  return GradMode::is_enabled() && (... || (ts.defined() && ts.requires_grad()));
}
bool needs_grad(std::span<const Tensor> ts);

/// The edge an input's gradient flows along (invalid when it needs none).
Edge gradient_edge(const Tensor& t);

/// A leaf's sink: adds the incoming gradient into the leaf's grad(). It
/// holds the leaf weakly: with create_graph, the leaf's grad() has a graph
/// that ends in this node, and a strong reference would make a cycle that
/// never frees either (PyTorch has that leak). A gradient for a leaf that no
/// longer exists is dropped.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

namespace detail {

/// Holds saved tensors; unpacks saved outputs with a link back to the node.
class SavedTensors {
 public:
  void save(std::span<const Tensor> saved, std::span<const Tensor> outputs);
  std::vector<Tensor> unpack(const std::shared_ptr<Node>& self, const char* op) const;
  void clear() { items_.clear(); }

 private:
  struct Item {
    Tensor data;         // outputs and leaves: detached alias; other inputs: the tensor itself
    int output_nr = -1;  // >= 0: output of this node
    std::shared_ptr<Node> leaf_accumulator;  // a leaf that requires grad: its AccumulateGrad
    uint64_t version = 0;
  };
  std::vector<Item> items_;
};

class FunctionNodeBase : public Node, public std::enable_shared_from_this<FunctionNodeBase> {
 public:
  using Node::Node;
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) final;
  void release() final {
    saved_.clear();
    released_ = true;
  }
  bool released() const final { return released_; }
  SavedTensors& saved() { return saved_; }

 protected:
  virtual Grads vjp(const VjpArgs& args) = 0;

 private:
  SavedTensors saved_;
  bool released_ = false;
};

template <class F>
class FunctionNode final : public FunctionNodeBase {
 public:
  FunctionNode(const char* name, F f) : FunctionNodeBase(name), f_(std::move(f)) {}

 protected:
  Grads vjp(const VjpArgs& args) override { return f_(args); }

 private:
  F f_;
};

void attach(const std::shared_ptr<FunctionNodeBase>& node, std::span<const Tensor> inputs,
            std::span<const Tensor> outputs, std::span<const Tensor> saved);

}  // namespace detail

/// Records op `name`: outputs get a node whose vjp maps output gradients to
/// one gradient per input (undefined for inputs that need none). Call only
/// when needs_grad(inputs...) holds. In-place ops pass the modified tensor as
/// both an input and an output.
template <class F>
void record(const char* name, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
            std::initializer_list<Tensor> saved, F vjp) {
  auto node = std::make_shared<detail::FunctionNode<F>>(name, std::move(vjp));
  detail::attach(node, {inputs.begin(), inputs.size()}, {outputs.begin(), outputs.size()},
                 {saved.begin(), saved.size()});
}

/// The same with inputs/outputs/saved held in vectors (cat, split, ...).
template <class F>
void record(const char* name, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
            std::span<const Tensor> saved, F vjp) {
  auto node = std::make_shared<detail::FunctionNode<F>>(name, std::move(vjp));
  detail::attach(node, inputs, outputs, saved);
}

/// For in-place ops (add_, mul_, ...), before writing: throws when grad mode
/// is on and `self` is a leaf that requires grad, or a view that is or would
/// become part of the graph (`others_require_grad`: another operand requires
/// grad). Autograd through in-place writes to views is not supported; clone()
/// first.
void check_inplace(const char* op, const Tensor& self, bool others_require_grad = false);

}  // namespace kiln
