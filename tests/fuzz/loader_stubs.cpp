// Definitions the loaders' object files name but a load never calls, whose
// homes (src/ops) the fuzz build leaves out: src/io/safetensors.cpp's
// save_safetensors calls Tensor::contiguous(), defined with the ops.
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln {

Tensor Tensor::contiguous() const {
  throw Error("contiguous", "not in the fuzz build, which compiles only kiln_core and the loaders");
}

}  // namespace kiln
