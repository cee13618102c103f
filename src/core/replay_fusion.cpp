// The Fusion pass's notes (kiln/core/replay_fusion.h).
#include "kiln/core/replay_fusion.h"

#include <cstring>

#include "kiln/core/replay.h"
#include "kiln/core/tensor.h"

namespace kiln::replay {

namespace {

struct Table {
  const Recorder* rec = nullptr;
  std::vector<FusionNote> notes;
};

Table& table() {
  thread_local Table t;
  return t;
}

// The active recorder, when its last launch is `op`'s (the launch just made).
const Recorder* owner(const char* op) {
  const Recorder* rec = active();
  if (!rec || rec->launches().empty() || std::strcmp(rec->launches().back().op, op) != 0) return nullptr;
  Table& t = table();
  if (t.rec != rec) t = {rec, {}};  // notes of an earlier recording (one that threw) go
  return rec;
}

}  // namespace

void note_linear(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias) {
  const Recorder* rec = owner("linear");
  if (!rec) return;
  FusionNote n;
  n.kind = FusionNote::Kind::Linear;
  n.launch = rec->launches().size() - 1;
  n.a = a.impl_ptr();
  n.b = b.impl_ptr();
  n.out = out.impl_ptr();
  if (bias.defined()) n.bias = bias.impl_ptr();
  table().notes.push_back(std::move(n));
}

void note_elementwise(const Tensor& out, const Tensor& x, std::function<void(const Tensor&, const Tensor&)> run) {
  const Recorder* rec = active();
  if (!rec || rec->launches().empty()) return;
  Table& t = table();
  if (t.rec != rec) t = {rec, {}};
  FusionNote n;
  n.kind = FusionNote::Kind::Elementwise;
  n.launch = rec->launches().size() - 1;
  n.a = x.impl_ptr();
  n.out = out.impl_ptr();
  n.run = std::move(run);
  t.notes.push_back(std::move(n));
}

void note_conv(const Tensor& large, const Tensor& w, const Tensor& out, const Tensor& bias,
               std::function<void(const Tensor&, const Tensor&, const Tensor*, const Tensor&)> produce) {
  const Recorder* rec = active();
  if (!rec || rec->launches().empty()) return;
  Table& t = table();
  if (t.rec != rec) t = {rec, {}};
  FusionNote n;
  n.kind = FusionNote::Kind::Conv;
  n.launch = rec->launches().size() - 1;
  n.a = large.impl_ptr();
  n.b = w.impl_ptr();
  n.out = out.impl_ptr();
  if (bias.defined()) n.bias = bias.impl_ptr();
  n.produce = std::move(produce);
  t.notes.push_back(std::move(n));
}

void note_binary(const Tensor& out, const Tensor& a, const Tensor& b) {
  const Recorder* rec = active();
  if (!rec || rec->launches().empty()) return;
  Table& t = table();
  if (t.rec != rec) t = {rec, {}};
  FusionNote n;
  n.kind = FusionNote::Kind::Binary;
  n.launch = rec->launches().size() - 1;
  n.a = a.impl_ptr();
  n.b = b.impl_ptr();
  n.out = out.impl_ptr();
  t.notes.push_back(std::move(n));
}

std::vector<FusionNote> take_fusion_notes(const Recorder* rec) {
  Table& t = table();
  std::vector<FusionNote> out;
  if (rec && t.rec == rec) out = std::move(t.notes);
  t = {};
  return out;
}

}  // namespace kiln::replay
