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
  enum class Kind { Linear, Elementwise, Conv, Binary };
  Kind kind = Kind::Linear;
  size_t launch = 0;  // index in the recorder's launches() when recorded
  // Linear: out [M, N] = a [M, K] @ b [K, N] + bias ([N] or none), f32.
  // Conv: out = conv(a, weight b) + bias, a convolution's forward kernel;
  // produce(a, b, bias, out) runs that kernel into another buffer of out's
  // shape (it holds the geometry, no tensor).
  // Elementwise: out = f(a), same shape and dtype, element by element;
  // run(out, in) runs the same kernel on other buffers of that shape (in may
  // be out: the kernel runs in place).
  // Binary: out = f(a, b), a, b and out of one shape and dtype, out[i] from
  // a[i] and b[i] alone (no broadcast): the memory plan may let out take the
  // memory of an input read for the last time (the kernel reads each index
  // before it writes it).
  std::weak_ptr<TensorImpl> a, b, out, bias;
  std::function<void(const Tensor& out, const Tensor& in)> run;
  std::function<void(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out)> produce;
};

/// Notes the launch just recorded (the last of the active recorder's).
void note_linear(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias);
/// `run` must hold no tensor (only the op's kind and scalars).
void note_elementwise(const Tensor& out, const Tensor& x, std::function<void(const Tensor&, const Tensor&)> run);
/// A convolution's forward launch (src/ops/conv.cpp): `produce` must hold no tensor.
void note_conv(const Tensor& large, const Tensor& w, const Tensor& out, const Tensor& bias,
               std::function<void(const Tensor&, const Tensor&, const Tensor*, const Tensor&)> produce);
/// An elementwise launch of two same-shape operands (no broadcast): out = f(a, b).
void note_binary(const Tensor& out, const Tensor& a, const Tensor& b);
/// The notes made while `rec` was recording, removed from the thread's table
/// (nullptr: drops them all, before a recording starts).
std::vector<FusionNote> take_fusion_notes(const Recorder* rec);

}  // namespace replay
}  // namespace kiln
