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

// A new note of the active recorder's last launch (the launch just made),
// to fill in; nullptr when nothing records, or when `op` is given and that
// launch is not `op`'s.
FusionNote* add_note(FusionNote::Kind kind, const char* op = nullptr) {
  const Recorder* rec = active();
  if (!rec || rec->launches().empty()) return nullptr;
  if (op && std::strcmp(rec->launches().back().op, op) != 0) return nullptr;
  Table& t = table();
  if (t.rec != rec) t = {rec, {}};  // notes of an earlier recording (one that threw) go
  FusionNote& n = t.notes.emplace_back();
  n.kind = kind;
  n.launch = rec->launches().size() - 1;
  return &n;
}

}  // namespace

void note_linear(const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& bias) {
  FusionNote* n = add_note(FusionNote::Kind::Linear, "linear");
  if (!n) return;
  n->a = a.impl_ptr();
  n->b = b.impl_ptr();
  n->out = out.impl_ptr();
  if (bias.defined()) n->bias = bias.impl_ptr();
}

void note_elementwise(const Tensor& out, const Tensor& x, std::function<void(const Tensor&, const Tensor&)> run) {
  FusionNote* n = add_note(FusionNote::Kind::Elementwise);
  if (!n) return;
  n->a = x.impl_ptr();
  n->out = out.impl_ptr();
  n->run = std::move(run);
}

void note_conv(const Tensor& large, const Tensor& w, const Tensor& out, const Tensor& bias,
               std::function<void(const Tensor&, const Tensor&, const Tensor*, const Tensor&)> produce) {
  FusionNote* n = add_note(FusionNote::Kind::Conv);
  if (!n) return;
  n->a = large.impl_ptr();
  n->b = w.impl_ptr();
  n->out = out.impl_ptr();
  if (bias.defined()) n->bias = bias.impl_ptr();
  n->produce = std::move(produce);
}

void note_binary(const Tensor& out, const Tensor& a, const Tensor& b) {
  FusionNote* n = add_note(FusionNote::Kind::Binary);
  if (!n) return;
  n->a = a.impl_ptr();
  n->b = b.impl_ptr();
  n->out = out.impl_ptr();
}

std::vector<FusionNote> take_fusion_notes(const Recorder* rec) {
  Table& t = table();
  std::vector<FusionNote> out;
  if (rec && t.rec == rec) out = std::move(t.notes);
  t = {};
  return out;
}

}  // namespace kiln::replay
