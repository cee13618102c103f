// Definitions the loaders' object files name but a load never calls, whose
// homes (src/ops, src/io/checkpoint.cpp with nn and optim) the fuzz build
// leaves out: src/io/gguf.cpp's writer (nn::check_quantized, Tensor::to), src/io/safetensors.cpp's save_safetensors calls
// Tensor::contiguous(), defined with the ops; src/io/checkpoint_manager.cpp's
// save and restore call Checkpoint::save and load (its fuzz target only opens
// folders).
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/io/checkpoint.h"
#include "kiln/nn/quantized.h"

namespace kiln {

namespace {
[[noreturn]] void not_built(const char* op) {
  throw Error(op, "not in the fuzz build, which compiles only kiln_core and the loaders");
}
}  // namespace

Tensor Tensor::contiguous() const { not_built("contiguous"); }
// src/io/gguf.cpp's writer and load_f32 (never called by its fuzz target).
Tensor Tensor::to(DType) const { not_built("to"); }
Tensor Tensor::reshape(const Shape&) const { not_built("reshape"); }
Tensor nn::dequantize(const nn::QuantizedTensor&) { not_built("dequantize"); }
void nn::check_quantized(const char* op, const std::string&, const nn::QuantizedTensor&) { not_built(op); }
void io::Checkpoint::save(const std::string&) const { not_built("Checkpoint.save"); }
void io::Checkpoint::load(const std::string&) { not_built("Checkpoint.load"); }

}  // namespace kiln
