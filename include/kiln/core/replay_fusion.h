// What the Fusion pass of a compiled step needs to know about a recorded
// launch (docs/compile.md, Fusion): a recorded launch is an opaque closure,
// so the ops whose launches may be fused describe them here, right after
// recording them. Only while recording (replay::active()); a no-op otherwise.
//
// The notes hold weak references: they must not change the use counts the
// passes read (NOTE [Buffers of a recording] in src/train/compiled_step.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace kiln {

class Tensor;
class TensorImpl;

namespace replay {

class Recorder;

struct FusionNote {
  enum class Kind { Linear, Elementwise };
  Kind kind = Kind::Linear;
  size_t launch = 0;  // index in the recorder's launches() when recorded
  // Linear: out [M, N] = a [M, K] @ b [K, N] + bias ([N] or none), f32.
  // Elementwise: out = f(a), same shape and dtype, element by element;
  // run(out, in) runs the same kernel on other buffers of that shape (in may
  // be out: the kernel runs in place).
  std::weak_ptr<TensorImpl> a, b, out, bias;
  std::function<void(const Tensor& out, const Tensor& in)> run;
};

/// Notes the launch just recorded (the last of the active recorder's).
void note_linear(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias);
/// `run` must hold no tensor (only the op's kind and scalars).
void note_elementwise(const Tensor& out, const Tensor& x, std::function<void(const Tensor&, const Tensor&)> run);
/// The notes made while `rec` was recording, removed from the thread's table
/// (nullptr: drops them all, before a recording starts).
std::vector<FusionNote> take_fusion_notes(const Recorder* rec);

}  // namespace replay
}  // namespace kiln
