// The backward engine. Nodes run in an order where every consumer of a
// node's outputs has run before it (dependency counting over the graph
// reachable from the roots), and gradients for the same (node, output) are
// summed before the node runs.
#include "kiln/autograd/engine.h"

#include <algorithm>
#include <memory>
#include <unordered_map>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/record.h"

namespace kiln {

namespace {

struct NodeTask {
  std::vector<Tensor> grads;  // one per output of the node
  int dependencies = 0;       // consumers that have not run yet
};

// One run's bookkeeping: Node* -> NodeTask through an open-addressing table,
// the DFS stack and the ready heap. Kept per thread and reused, so a
// steady-state backward makes no hash-map nodes (two mallocs per graph node
// with std::unordered_map/set) and keeps its vectors' capacity. A backward
// started from inside another one (a custom function's vjp) takes the next
// scratch; reset() drops every gradient when a run ends.
class Scratch {
 public:
  // The task of n, created when absent; `added` tells which.
  NodeTask& get(Node* n, bool* added = nullptr) {
    if (2 * (used_ + 1) > keys_.size()) grow();
    size_t i = slot(n);
    if (keys_[i] != n) {
      keys_[i] = n;
      vals_[i] = uint32_t(used_);
      if (tasks_.size() == used_) tasks_.emplace_back();
      ++used_;
      if (added) *added = true;
    } else if (added) {
      *added = false;
    }
    return tasks_[vals_[i]];
  }
  void reset() {
    for (size_t i = 0; i < used_; ++i) {
      tasks_[i].grads.clear();
      tasks_[i].dependencies = 0;
    }
    used_ = 0;
    std::fill(keys_.begin(), keys_.end(), nullptr);
    stack.clear();
    ready.clear();
  }

  std::vector<Node*> stack;  // DFS of the counting pass
  std::vector<Node*> ready;  // heap: latest-created node on top

 private:
  size_t slot(Node* n) const {  // linear probing from a multiplicative hash
    size_t mask = keys_.size() - 1;
    size_t i = size_t((reinterpret_cast<uintptr_t>(n) >> 4) * 0x9E3779B97F4A7C15ull >> 20) & mask;
    while (keys_[i] != nullptr && keys_[i] != n) i = (i + 1) & mask;
    return i;
  }
  void grow() {
    std::vector<Node*> old_keys = std::move(keys_);
    std::vector<uint32_t> old_vals = std::move(vals_);
    keys_.assign(std::max<size_t>(64, old_keys.size() * 2), nullptr);
    vals_.assign(keys_.size(), 0);
    for (size_t j = 0; j < old_keys.size(); ++j) {
      if (!old_keys[j]) continue;
      size_t i = slot(old_keys[j]);
      keys_[i] = old_keys[j];
      vals_[i] = old_vals[j];
    }
  }

  std::vector<Node*> keys_;
  std::vector<uint32_t> vals_;
  std::vector<NodeTask> tasks_;  // [0, used_) belong to the current run
  size_t used_ = 0;
};

// The calling thread's scratch for the current nesting depth, reset on exit.
class ScratchLease {
 public:
  ScratchLease() {
    thread_local std::vector<std::unique_ptr<Scratch>> pool;
    thread_local size_t depth = 0;
    if (pool.size() == depth) pool.push_back(std::make_unique<Scratch>());
    s_ = pool[depth].get();
    depth_ = &depth;
    ++depth;
  }
  ~ScratchLease() {
    s_->reset();
    --*depth_;
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  Scratch& operator*() const { return *s_; }

 private:
  Scratch* s_;
  size_t* depth_;
};

// Gradient of input `t` is captured instead of accumulated: `capture[edge]`.
struct Capture {
  std::unordered_map<Node*, std::vector<std::pair<uint32_t, size_t>>> at;  // node -> (output_nr, slot)
  std::vector<Tensor> values;
  std::vector<Edge> keep;  // holds leaves' AccumulateGrad nodes alive during the run
};

void accumulate(Tensor& slot, const Tensor& g) { slot = slot.defined() ? add(slot, g) : g; }

void run_backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                  bool retain_graph, bool create_graph, Capture* capture) {
  const char* op = capture ? "grad" : "backward";
  KILN_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), op,
             "got {} gradients for {} outputs", grad_outputs.size(), outputs.size());

  // Seed gradients.
  std::vector<std::pair<Edge, Tensor>> roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    KILN_CHECK(out.defined(), op, "output {} is undefined", i);
    KILN_CHECK(out.requires_grad(), op,
               "output {} of shape {} does not require grad (no input requires grad, or it was "
               "computed under NoGradGuard)",
               i, to_string(out.shape()));
    Tensor g = i < grad_outputs.size() ? grad_outputs[i] : Tensor();
    if (!g.defined()) {
      KILN_CHECK(out.numel() == 1, op,
                 "a gradient must be given for output {} of shape {}; only scalars get an implicit 1", i,
                 to_string(out.shape()));
      g = ones_like(out);
    } else {
      KILN_CHECK(g.shape() == out.shape(), op, "gradient of shape {} for output {} of shape {}",
                 to_string(g.shape()), i, to_string(out.shape()));
    }
    roots.emplace_back(gradient_edge(out), g);
  }

  // Count, for each reachable node, how many edges point at it.
  ScratchLease lease;
  Scratch& tasks = *lease;
  for (auto& [edge, g] : roots) {
    bool added;
    tasks.get(edge.fn.get(), &added);
    if (added) tasks.stack.push_back(edge.fn.get());
  }
  while (!tasks.stack.empty()) {
    Node* n = tasks.stack.back();
    tasks.stack.pop_back();
    tasks.get(n).grads.resize(n->outputs().size());
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      bool added;
      ++tasks.get(e.fn.get(), &added).dependencies;
      if (added) tasks.stack.push_back(e.fn.get());
    }
  }

  GradModeGuard mode(create_graph);

  for (auto& [edge, g] : roots) accumulate(tasks.get(edge.fn.get()).grads[edge.output_nr], g);

  // Ready nodes, latest-created first (mirrors the forward order in reverse).
  auto later = [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); };
  auto push_ready = [&](Node* n) {
    tasks.ready.push_back(n);
    std::push_heap(tasks.ready.begin(), tasks.ready.end(), later);
  };
  for (auto& [edge, g] : roots) {
    Node* n = edge.fn.get();
    NodeTask& t = tasks.get(n);
    if (t.dependencies == 0) {
      t.dependencies = -1;  // queued
      push_ready(n);
    }
  }

  while (!tasks.ready.empty()) {
    std::pop_heap(tasks.ready.begin(), tasks.ready.end(), later);
    Node* n = tasks.ready.back();
    tasks.ready.pop_back();
    NodeTask& task = tasks.get(n);
    for (size_t i = 0; i < task.grads.size(); ++i)
      if (!task.grads[i].defined()) task.grads[i] = zeros(n->outputs()[i].shape, {.dtype = n->outputs()[i].dtype});

    for (auto& [nr, weak] : n->retained())
      if (auto impl = weak.lock()) Tensor(impl).set_grad(create_graph ? task.grads[nr] : task.grads[nr].detach());

    bool captured = false;
    if (capture) {
      auto it = capture->at.find(n);
      if (it != capture->at.end()) {
        for (auto [nr, slot] : it->second) accumulate(capture->values[slot], task.grads[nr]);
        captured = true;
      }
    }
    // torch.autograd.grad does not touch .grad of leaves.
    bool is_leaf_sink = dynamic_cast<AccumulateGrad*>(n) != nullptr;
    std::vector<Tensor> in_grads;
    if (!(is_leaf_sink && (capture || captured))) in_grads = n->apply(std::move(task.grads));
    task.grads.clear();
    if (!retain_graph) n->release();

    const auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!edges[i].valid()) continue;
      Node* next = edges[i].fn.get();
      NodeTask& nt = tasks.get(next);
      if (i < in_grads.size() && in_grads[i].defined()) accumulate(nt.grads[edges[i].output_nr], in_grads[i]);
      if (--nt.dependencies == 0) {
        nt.dependencies = -1;
        push_ready(next);
      }
    }
  }
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph,
              bool create_graph) {
  run_backward(outputs, grad_outputs, retain_graph || create_graph, create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  Capture capture;
  capture.values.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(inputs[i].defined() && inputs[i].requires_grad(), "grad", "input {} does not require grad", i);
    Edge e = gradient_edge(inputs[i]);
    capture.at[e.fn.get()].emplace_back(e.output_nr, i);
    capture.keep.push_back(std::move(e));
  }
  run_backward(outputs, grad_outputs, retain_graph || create_graph, create_graph, &capture);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (capture.values[i].defined()) {
      if (!create_graph) capture.values[i] = capture.values[i].detach();
      continue;
    }
    KILN_CHECK(allow_unused, "grad",
               "input {} of shape {} was not used to compute the outputs; pass allow_unused=true", i,
               to_string(inputs[i].shape()));
  }
  return capture.values;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  kiln::backward({*this}, {gradient}, retain_graph, create_graph);
}

}  // namespace kiln
