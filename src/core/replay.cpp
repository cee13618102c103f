// The recorder of NOTE [Recorded launches] (kiln/core/replay.h).
#include "kiln/core/replay.h"

#include <algorithm>
#include <mutex>

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

bool Recorder::touch_fresh(const std::shared_ptr<Storage>& s) {
  if (!storage_set_.insert(s.get()).second) return false;
  storages_.push_back(s);
  return true;
}

void Recorder::note_impl(const std::shared_ptr<TensorImpl>& impl) {
  ImplUse& u = impls_[impl.get()];
  // An entry whose tensor died (its address now reused) held no closure
  // reference, or the tensor could not have died: start it afresh.
  if (u.impl.expired()) u = {impl, 0};
}

void Recorder::append(Launch launch, const std::vector<std::shared_ptr<TensorImpl>>& reached) {
  // Copying the closure copies its captures: each tensor handle it holds adds
  // one reference. The difference is the closure's share of each count.
  if (!reached.empty() && launch.run) {
    std::vector<long> before;
    before.reserve(reached.size());
    for (const auto& r : reached) before.push_back(r.use_count());
    {
      std::function<void()> copy = launch.run;
      for (size_t i = 0; i < reached.size(); ++i) {
        const long held = reached[i].use_count() - before[i];
        // The same tensor may appear twice in `reached`: count it once.
        if (held > 0 && std::find(reached.begin(), reached.begin() + i, reached[i]) == reached.begin() + i)
          impls_[reached[i].get()].closure_refs += held;
      }
    }
  }
  launches_.push_back(std::move(launch));
}

void Recorder::erase_launches(const std::vector<char>& drop) {
  // The references the dropped closures hold disappear with them: measure
  // each known tensor's count before and after.
  std::vector<std::pair<ImplUse*, std::shared_ptr<TensorImpl>>> alive;
  for (auto& [p, u] : impls_)
    if (auto sp = u.impl.lock()) alive.emplace_back(&u, std::move(sp));
  std::vector<long> before;
  before.reserve(alive.size());
  for (auto& a : alive) before.push_back(a.second.use_count());
  std::vector<Launch> kept;
  kept.reserve(launches_.size());
  {
    std::vector<Launch> gone;
    for (size_t i = 0; i < launches_.size(); ++i)
      (i < drop.size() && drop[i] ? gone : kept).push_back(std::move(launches_[i]));
  }
  launches_ = std::move(kept);
  for (size_t i = 0; i < alive.size(); ++i) alive[i].first->closure_refs -= before[i] - alive[i].second.use_count();
}

void Recorder::replace_storage(const Storage* from, const std::shared_ptr<Storage>& to) {
  for (Launch& l : launches_)
    for (auto* list : {&l.touched, &l.writes}) {
      auto& t = *list;
      auto it = std::find(t.begin(), t.end(), from);
      if (it == t.end()) continue;
      if (to && std::find(t.begin(), t.end(), to.get()) == t.end()) *it = to.get();
      else t.erase(it);
    }
  storage_set_.erase(from);
  auto it = std::find_if(storages_.begin(), storages_.end(), [&](const auto& s) { return s.get() == from; });
  if (it == storages_.end()) return;
  if (to && storage_set_.insert(to.get()).second) *it = to;
  else storages_.erase(it);
}

void Recorder::replay() const {
  for (const auto& s : storages_) s->bump_version();
  for (const Launch& l : launches_) l.run();
}

namespace {

// The writes of the last recorded launch: a storage no earlier launch
// touched is its output; one whose version an op bumped after it (the
// in-place ops do, NOTE [Version counter]) was written in place. Called when
// the next launch starts and when the recording ends.
void settle_writes(detail::ThreadState& s) {
  if (!s.rec) return;
  auto& versions = s.rec->versions();
  if (s.rec->launches().empty() || versions.empty()) {
    versions.clear();
    return;
  }
  Launch& l = s.rec->launches().back();
  for (auto [st, v] : versions)
    if (st->version() != v && std::find(l.writes.begin(), l.writes.end(), st) == l.writes.end())
      l.writes.push_back(st);
  versions.clear();
}

}  // namespace

RecordingScope::RecordingScope(Recorder& rec) {
  detail::ThreadState& s = detail::state();
  KILN_CHECK(s.rec == nullptr, "RecordingScope", "a recording is already active on this thread");
  s = {};
  s.rec = &rec;
}

RecordingScope::~RecordingScope() {
  settle_writes(detail::state());
  detail::state() = {};
}

void launch(const char* op, std::function<void()> fn, bool pure) {
  detail::ThreadState& s = detail::state();
  Launch l;
  l.op = op;
  l.run = std::move(fn);
  l.pure = pure;
  settle_writes(s);
  s.current = &l;
  s.rec->reached().clear();
  ++s.launch_depth;
  try {
    l.run();
  } catch (...) {
    --s.launch_depth;
    s.current = nullptr;
    s.rec->reached().clear();
    throw;
  }
  --s.launch_depth;
  s.current = nullptr;
  // Tensors made and dropped inside the launch (a kernel's scratch) are gone:
  // only the ones still alive can be held by the closure.
  std::vector<std::shared_ptr<TensorImpl>> reached;
  reached.swap(s.rec->reached());
  s.rec->append(std::move(l), reached);
}

void note_copy(const Tensor& src, const Tensor& dst) {
  Recorder* rec = active();
  if (!rec || rec->launches().empty()) return;
  Launch& l = rec->launches().back();
  l.copy_src = src.impl();
  l.copy_dst = dst.impl();
}

void host_read(const char* what) {
  if (Recorder* rec = active())
    rec->reject("SemanticValidation", what,
                std::string("host read: ") + what +
                    "() reads a tensor's value on the host while the step is recorded; a replay could not "
                    "reproduce what the host does with it (data-dependent control flow)");
}

void on_data_access(const std::shared_ptr<TensorImpl>& impl) {
  detail::ThreadState& s = detail::state();
  if (!s.rec) return;
  // parallel_run's workers report to the same recording (parallel.cpp).
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  const std::shared_ptr<Storage>& storage = impl->storage;
  if (s.launch_depth > 0) {
    if (!s.current) s.rec->touch(storage);
    else {
      auto& t = s.current->touched;
      if (std::find(t.begin(), t.end(), storage.get()) == t.end()) {
        t.push_back(storage.get());
        if (s.rec->touch_fresh(storage)) s.current->writes.push_back(storage.get());
        else s.rec->versions().emplace_back(storage.get(), storage->version());
      }
      s.rec->note_impl(impl);
      auto& r = s.rec->reached();
      if (std::find(r.begin(), r.end(), impl) == r.end()) r.push_back(impl);
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
  std::vector<std::shared_ptr<TensorImpl>> reached{tensor};
  if (grad) {
    // The assigned gradient counts as reached: what produced it stays live
    // (dead-op removal) and its memory is in use from here (memory plan).
    rec->touch(grad->storage);
    l.touched.push_back(grad->storage.get());
    rec->note_impl(grad);
    reached.push_back(grad);
  }
  rec->note_impl(tensor);
  rec->append(std::move(l), reached);
}

void reject(const char* stage, const char* op, std::string reason) {
  if (Recorder* rec = detail::state().rec) rec->reject(stage, op, std::move(reason));
}

}  // namespace kiln::replay
