// The backward engine: walks the tape from some outputs to the leaves.
#pragma once

#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

/// Backpropagates `grad_outputs` (undefined entries mean ones, allowed only for
/// scalar outputs) from `outputs` and accumulates into the grad() of every
/// leaf that requires grad. retain_graph keeps saved tensors for another
/// backward; create_graph records the backward itself (higher derivatives).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

/// Gradients of `outputs` with respect to `inputs`, returned rather than
/// accumulated (torch.autograd.grad). An input that does not influence the
/// outputs gets an undefined tensor when allow_unused, else an error.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

}  // namespace kiln
