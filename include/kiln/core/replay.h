// Recording of a step's kernel launches for replay (SPECS A4; the recorder
// behind train::CompiledStep, docs/compile.md).
//
// NOTE [Recorded launches]
// While a Recorder is active on a thread, every kernel launch an op makes
// through KILN_LAUNCH runs at once (eager, so the recording step's results
// are eager's) and is appended to the recording as a closure over the
// launch's arguments: tensor handles (which keep their storage alive, so
// every buffer keeps its address: the recording's memory plan) and scalars
// computed from shapes and fixed options. A launch whose arguments change
// between steps reads them at replay from live objects instead of baking
// them in: a random op advances the live Generator (recorder.allows(gen)),
// the optimizer update runs Optimizer::step's update with the live learning
// rate and step count. Replay runs the closures in order: no argument
// checks, no allocation, no tape.
//
// Safety comes from one choke point: Tensor::data_ptr. Kernels reach tensor
// memory only through it, so an access while recording and outside a
// recorded launch is host code touching data (item(), to_vector(), an op
// whose kernel call is not wrapped, i.e. without a replay rule) and rejects
// the recording by name; the step still ran eagerly and stays correct, and
// the caller keeps running it eagerly. Gradient assignments
// (Tensor::set_grad: AccumulateGrad, zero_grad) are host effects and are
// recorded as closures too, so that grad() after a replay is what eager
// would leave.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kiln {

class Storage;
class Generator;
class Tensor;
class TensorImpl;

namespace replay {

/// One recorded launch: what an op asked a kernel to do, replayable.
struct Launch {
  const char* op = "";               // the op (or host effect) that made it
  std::function<void()> run;         // the kernel call over captured arguments
  std::vector<Storage*> touched;     // storages its kernel reached (data_ptr), in order of first touch;
                                     // for a grad assignment, the assigned gradient's storage
  bool host_effect = false;          // a grad assignment, not a kernel
  std::vector<Storage*> writes;      // the touched storages it writes, as far as the recorder can tell:
                                     // those no earlier launch touched (its fresh outputs) and those whose
                                     // version an op bumped after it (NOTE [Version counter]: in-place writes)
  bool pure = false;                 // a KILN_LAUNCH kernel: its only effects are on `touched` (no
                                     // generator, optimizer or host state), so dead-op removal may drop it
  const TensorImpl* copy_src = nullptr;  // note_copy: this launch copies all of *copy_src into the
  const TensorImpl* copy_dst = nullptr;  // fresh *copy_dst (AccumulateGrad's clone); copy elision may alias them
};

/// A tensor a recorded launch reached, and how many references to it the
/// recording's closures hold (measured when each closure is recorded). A
/// tensor whose every reference is a closure's is invisible outside the
/// recording: the passes of train::CompiledStep may move its memory.
struct ImplUse {
  std::weak_ptr<TensorImpl> impl;
  int64_t closure_refs = 0;
};

/// Why a recording cannot be replayed: the stage and a message naming the op.
struct Rejection {
  std::string stage;   // "SemanticValidation" or "ReplaySafety"
  std::string op;      // the op or host read that caused it
  std::string reason;  // full sentence
};

/// The recording of one step. Activate it with RecordingScope around the
/// step; afterwards launches() is the program, or rejection() says why not.
class Recorder {
 public:
  /// `generators`: the generators a random op may draw from at replay (they
  /// must outlive the recording; the step's modules own them). A random op
  /// on any other generator (a temporary from Rngs::next) is rejected.
  explicit Recorder(std::vector<const Generator*> generators = {});
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  const std::vector<Launch>& launches() const { return launches_; }
  std::vector<Launch>& launches() { return launches_; }
  bool rejected() const { return !rejection_.reason.empty(); }
  const Rejection& rejection() const { return rejection_; }
  bool allows(const Generator& gen) const;
  /// Every storage a launch reached, kept alive by the recording (the
  /// passes replace or drop entries when they move a buffer's memory).
  const std::vector<std::shared_ptr<Storage>>& storages() const { return storages_; }
  std::vector<std::shared_ptr<Storage>>& storages() { return storages_; }
  /// The tensors launches reached (data_ptr, or assigned as a gradient).
  const std::unordered_map<const TensorImpl*, ImplUse>& impls() const { return impls_; }
  /// Storages allocated while recording (the step's own buffers).
  int64_t storages_born() const { return born_; }

  /// Runs every launch in order (a replay). Bumps the version counter of every
  /// storage the recording reaches first: kernels that cache derived copies
  /// keyed by (storage, version) (convolution's reordered inputs) must see
  /// the buffers' new contents as new.
  void replay() const;

  // ---- used by the hooks (below) ----
  void reject(const char* stage, std::string op, std::string reason);
  /// Appends a finished launch, counting the references its closure holds
  /// to the tensors in `reached` (ImplUse::closure_refs).
  void append(Launch launch, const std::vector<std::shared_ptr<TensorImpl>>& reached = {});
  void touch(const std::shared_ptr<Storage>& s) { (void)touch_fresh(s); }
  /// touch(), true when no launch had touched `s` before.
  bool touch_fresh(const std::shared_ptr<Storage>& s);
  void note_impl(const std::shared_ptr<TensorImpl>& impl);
  /// The tensors the launch being recorded reached (kept until appended).
  std::vector<std::shared_ptr<TensorImpl>>& reached() { return reached_; }
  /// The last launch's touched storages with their versions at first touch.
  std::vector<std::pair<Storage*, uint64_t>>& versions() { return versions_; }

  // ---- used by the passes (train::CompiledStep) ----
  /// Drops the launches whose `drop` entry is non-zero (in order; keeps
  /// closure_refs exact: the dropped closures' references go with them).
  void erase_launches(const std::vector<char>& drop);
  /// `from` becomes `to` in storages() and in every launch's touched list;
  /// a null `to` drops it (the recording no longer holds it).
  void replace_storage(const Storage* from, const std::shared_ptr<Storage>& to);
  void note_born() { ++born_; }

 private:
  std::vector<Launch> launches_;
  std::vector<std::shared_ptr<Storage>> storages_;
  std::unordered_set<const Storage*> storage_set_;
  std::unordered_map<const TensorImpl*, ImplUse> impls_;
  std::vector<std::shared_ptr<TensorImpl>> reached_;
  std::vector<std::pair<Storage*, uint64_t>> versions_;
  std::vector<const Generator*> generators_;
  Rejection rejection_;
  int64_t born_ = 0;
};

/// Makes `rec` the thread's active recorder for its lifetime (not nestable).
class RecordingScope {
 public:
  explicit RecordingScope(Recorder& rec);
  ~RecordingScope();
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;
};

namespace detail {
// Trivially constructible: a thread_local of it needs no initialisation
// guard, so Tensor::data_ptr's recording() test stays one load.
struct ThreadState {
  Recorder* rec = nullptr;
  int launch_depth = 0;           // > 0 inside a recorded launch (nested ops run, not recorded)
  Launch* current = nullptr;      // the launch being recorded
  const char* last_op = "";       // the last op that entered (backend::device_of)
};
inline thread_local ThreadState tl_state;
inline ThreadState& state() { return tl_state; }
}  // namespace detail

/// The thread's recorder when recording and not inside a launch; else null.
inline Recorder* active() {
  detail::ThreadState& s = detail::state();
  return s.rec && s.launch_depth == 0 ? s.rec : nullptr;
}
/// True while any recorder is active on this thread (inside launches too).
inline bool recording() { return detail::state().rec != nullptr; }

/// Runs `fn` now as a recorded launch of `op` and appends it to the active
/// recorder (call only when active() is non-null). `pure`: fn's only effects
/// are on the tensor memory it reaches (KILN_LAUNCH's kernels); a launch that
/// reads live host objects (an optimizer, a generator) is not pure.
void launch(const char* op, std::function<void()> fn, bool pure = false);

/// Marks the launch just recorded as a copy of all of `src` into the fresh,
/// contiguous `dst` of the same shape and dtype (AccumulateGrad's clone of a
/// gradient): the copy-elision pass may make dst share src's memory when
/// nothing reaches src afterwards. No-op when not recording.
void note_copy(const Tensor& src, const Tensor& dst);

/// Notes the op that just entered (for rejection messages). Cheap.
inline void note_op(const char* op) {
  detail::ThreadState& s = detail::state();
  if (s.rec) s.last_op = op;
}

/// A host read of tensor values by `what` ("item", "to_vector"): rejects the
/// active recording. No-op when not recording or inside a launch.
void host_read(const char* what);

/// Hook of Tensor::data_ptr (only called while recording).
void on_data_access(const std::shared_ptr<TensorImpl>& impl);

/// Hook of Tensor::set_grad (only called when active()): records the assignment.
void on_set_grad(const std::shared_ptr<TensorImpl>& tensor, const std::shared_ptr<TensorImpl>& grad);

/// Rejects the active recording (no-op when none): `stage`, `op`, `reason`.
void reject(const char* stage, const char* op, std::string reason);

}  // namespace replay
}  // namespace kiln

/// Runs `call` (a kernel call statement over arguments that stay valid: tensor
/// handles, scalars) and, while a recorder is active, records it for replay.
/// The closure captures by copy, so tensor arguments must be handles or
/// references to handles, never raw pointers into temporaries.
///   KILN_LAUNCH("add", backend::cpu::add(out, a, b));
#define KILN_LAUNCH(op, ...)                                                   \
  do {                                                                         \
    if (::kiln::replay::active()) [[unlikely]]                                 \
      ::kiln::replay::launch(op, [=]() { __VA_ARGS__; }, true);                \
    else {                                                                     \
      __VA_ARGS__;                                                             \
    }                                                                          \
  } while (0)
