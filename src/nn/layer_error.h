// Errors from the ops a layer runs carry the layer's name in front:
// "[MaxPool2d] [max_pool2d] input [1, 1, 3, 3] is too small for kernel_size (5, 5) ...".
#pragma once

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln::nn {

// Runs `op()` for `layer`; a kiln::Error thrown inside is rethrown naming the layer.
// Zero cost when nothing throws.
template <class F>
Tensor in_layer(const char* layer, F&& op) {
  try {
    return op();
  } catch (const Error& e) {
    throw Error(layer, e.what(), e.file(), e.line());
  }
}

}  // namespace kiln::nn
