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
#include <memory>
#include <vector>

namespace kiln {

class Tensor;
class TensorImpl;

namespace replay {

class Recorder;

struct FusionNote {
  enum class Kind { Linear, Unary };
  Kind kind = Kind::Linear;
  size_t launch = 0;  // index in the recorder's launches() when recorded
  // Linear: out [M, N] = a [M, K] @ b [K, N] + bias ([N] or none), f32.
  // Unary: out = op(a) elementwise, same shape and dtype; op and the two
  // parameters as backend::cpu::unary takes them (UnaryOp, OpParams p0/p1).
  std::weak_ptr<TensorImpl> a, b, out, bias;
  int op = 0;
  double p0 = 0, p1 = 0;
};

/// Notes the launch just recorded (the last of the active recorder's).
void note_linear(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias);
void note_unary(int op, const Tensor& out, const Tensor& x, double p0, double p1);
/// The notes made while `rec` was recording, removed from the thread's table
/// (nullptr: drops them all, before a recording starts).
std::vector<FusionNote> take_fusion_notes(const Recorder* rec);

}  // namespace replay
}  // namespace kiln
