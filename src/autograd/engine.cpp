// The backward engine. Nodes run in an order where every consumer of a
// node's outputs has run before it (dependency counting over the graph
// reachable from the roots), and gradients for the same (node, output) are
// summed before the node runs.
#include "kiln/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

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
  std::unordered_map<Node*, NodeTask> tasks;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (auto& [edge, g] : roots)
    if (seen.insert(edge.fn.get()).second) stack.push_back(edge.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    tasks[n].grads.resize(n->outputs().size());
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++tasks[e.fn.get()].dependencies;
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }

  GradModeGuard mode(create_graph);

  for (auto& [edge, g] : roots) accumulate(tasks[edge.fn.get()].grads[edge.output_nr], g);

  // Ready nodes, latest-created first (mirrors the forward order in reverse).
  auto later = [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later)> ready(later);
  for (auto& [edge, g] : roots) {
    Node* n = edge.fn.get();
    if (tasks[n].dependencies == 0) {
      tasks[n].dependencies = -1;  // queued
      ready.push(n);
    }
  }

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    NodeTask& task = tasks[n];
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
      NodeTask& nt = tasks[next];
      if (i < in_grads.size() && in_grads[i].defined()) accumulate(nt.grads[edges[i].output_nr], in_grads[i]);
      if (--nt.dependencies == 0) {
        nt.dependencies = -1;
        ready.push(next);
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
