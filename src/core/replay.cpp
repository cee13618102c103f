// The recorder of NOTE [Recorded launches] (kiln/core/replay.h).
#include "kiln/core/replay.h"

#include <algorithm>

#include "kiln/core/error.h"
#include "kiln/core/storage.h"
#include "kiln/core/tensor.h"

namespace kiln::replay {

Recorder::Recorder(std::vector<const Generator*> generators) : generators_(std::move(generators)) {}
Recorder::~Recorder() = default;

bool Recorder::allows(const Generator& gen) const {
  return std::find(generators_.begin(), generators_.end(), &gen) != generators_.end();
}

void Recorder::reject(const char* stage, std::string op, std::string reason) {
  if (rejected()) return;  // the first reason is the one that matters
  rejection_ = {stage, std::move(op), std::move(reason)};
}

void Recorder::touch(const std::shared_ptr<Storage>& s) {
  if (storage_set_.insert(s.get()).second) storages_.push_back(s);
}

void Recorder::replay() const {
  for (const auto& s : storages_) s->bump_version();
  for (const Launch& l : launches_) l.run();
}

RecordingScope::RecordingScope(Recorder& rec) {
  detail::ThreadState& s = detail::state();
  KILN_CHECK(s.rec == nullptr, "RecordingScope", "a recording is already active on this thread");
  s = {};
  s.rec = &rec;
}

RecordingScope::~RecordingScope() { detail::state() = {}; }

void launch(const char* op, std::function<void()> fn) {
  detail::ThreadState& s = detail::state();
  Launch l;
  l.op = op;
  l.run = std::move(fn);
  s.current = &l;
  ++s.launch_depth;
  try {
    l.run();
  } catch (...) {
    --s.launch_depth;
    s.current = nullptr;
    throw;
  }
  --s.launch_depth;
  s.current = nullptr;
  s.rec->append(std::move(l));
}

void host_read(const char* what) {
  if (Recorder* rec = active())
    rec->reject("SemanticValidation", what,
                std::string("host read: ") + what +
                    "() reads a tensor's value on the host while the step is recorded; a replay could not "
                    "reproduce what the host does with it (data-dependent control flow)");
}

void on_data_access(const std::shared_ptr<Storage>& storage) {
  detail::ThreadState& s = detail::state();
  if (!s.rec) return;
  if (s.launch_depth > 0) {
    s.rec->touch(storage);
    if (s.current) {
      auto& t = s.current->touched;
      if (std::find(t.begin(), t.end(), storage.get()) == t.end()) t.push_back(storage.get());
    }
    return;
  }
  s.rec->reject("ReplaySafety", s.last_op,
                std::string("op '") + s.last_op +
                    "' reached tensor memory outside a recorded kernel launch (no replay rule for it, or a "
                    "host read of tensor data)");
}

void on_set_grad(const std::shared_ptr<TensorImpl>& tensor, const std::shared_ptr<TensorImpl>& grad) {
  Recorder* rec = active();
  if (!rec) return;
  Launch l;
  l.op = "set_grad";
  l.host_effect = true;
  l.run = [tensor, grad] { tensor->autograd_meta().grad = grad; };
  rec->append(std::move(l));
}

void reject(const char* stage, const char* op, std::string reason) {
  if (Recorder* rec = detail::state().rec) rec->reject(stage, op, std::move(reason));
}

}  // namespace kiln::replay
