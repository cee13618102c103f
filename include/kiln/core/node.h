// The autograd tape's data: a Node per recorded op, edges to the nodes that
// produced its inputs. Ops (layer `ops`) create nodes; the engine (layer
// `autograd`) walks them. Kept in core because a Tensor points at its node.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/shape.h"

namespace kiln {

class Tensor;
class TensorImpl;
class Node;

/// Where an input's gradient goes: output `output_nr` of node `fn`. A null fn
/// means the input needs no gradient.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t output_nr = 0;
  bool valid() const { return fn != nullptr; }
};

/// Shape and dtype of a node output, to make zero gradients for outputs that
/// received none.
struct OutputInfo {
  Shape shape;
  DType dtype;
};

class Node {
 public:
  explicit Node(const char* name);
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// The op that recorded this node ("exp", "matmul", ...).
  const char* name() const { return name_; }
  /// Grows with creation order; the engine runs later nodes first on ties.
  uint64_t sequence_nr() const { return sequence_nr_; }

  /// grads[i] is the gradient of output i (defined: missing ones are zero
  /// filled). Returns one gradient per entry of next_edges() (undefined where
  /// the edge is invalid).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  /// Drops what apply() needs (saved tensors) once the graph is not retained.
  virtual void release() {}
  /// True once release() ran; apply() then throws.
  virtual bool released() const { return false; }

  std::vector<Edge>& next_edges() { return next_; }
  const std::vector<Edge>& next_edges() const { return next_; }
  std::vector<OutputInfo>& outputs() { return outputs_; }
  const std::vector<OutputInfo>& outputs() const { return outputs_; }
  /// Non-leaf tensors that called retain_grad(): (output index, tensor).
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>>& retained() { return retained_; }

 private:
  const char* name_;
  uint64_t sequence_nr_;
  std::vector<Edge> next_;
  std::vector<OutputInfo> outputs_;
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retained_;
};

/// Run by a leaf's AccumulateGrad after it has added the incoming gradient
/// into the leaf's grad(): for that backward the leaf's grad is then final
/// (PyTorch's register_post_accumulate_grad_hook). Registered through
/// kiln/autograd/hooks.h; dist::DataParallel launches its bucket reductions
/// from it.
class PostAccumulateGradHook {
 public:
  virtual ~PostAccumulateGradHook() = default;
  virtual void operator()(const Tensor& leaf) = 0;
};

/// Per-tensor autograd state, allocated only for tensors that take part.
struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;              // non-leaf keeps its grad (retain_grad())
  std::shared_ptr<TensorImpl> grad;       // accumulated gradient (leaves, retained non-leaves)
  std::shared_ptr<Node> grad_fn;          // null for leaves
  uint32_t output_nr = 0;                 // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;   // leaves: the AccumulateGrad in use
  std::vector<std::shared_ptr<PostAccumulateGradHook>> post_accumulate_grad_hooks;  // leaves, in order
};

}  // namespace kiln
