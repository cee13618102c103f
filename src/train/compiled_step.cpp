// CompiledStep: a signature cache of recordings (kiln/train/compiled_step.h,
// docs/compile.md). The recorder itself is core's (kiln/core/replay.h); this
// file decides when to record, runs the passes over a recording and replays.
#include "kiln/train/compiled_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>

#include "kiln/core/generator.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/replay.h"
#include "kiln/core/storage.h"
#include "kiln/nn/module.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/shape.h"
#include "kiln/optim/optimizer.h"
#include "kiln/train/metrics.h"
#include "kiln/train/steps.h"

namespace kiln::train {

const char* to_string(PassStatus s) {
  switch (s) {
    case PassStatus::NotRun: return "NotRun";
    case PassStatus::Inherited: return "Inherited";
    case PassStatus::Analyzed: return "Analyzed";
    case PassStatus::Applied: return "Applied";
    case PassStatus::Rejected: return "Rejected";
  }
  return "?";
}

const PassReport* CaptureEvidence::find(const std::string& stage) const {
  for (const PassReport& p : passes)
    if (p.stage == stage) return &p;
  return nullptr;
}

std::string CaptureEvidence::str() const {
  std::string out = fmt::format("capture evidence: {} ({} launches, {} host effects, {} buffers, {} bytes)\n",
                                replayable ? "replayable" : "rejected, runs eagerly", launches, host_effects,
                                buffers, buffer_bytes);
  for (const PassReport& p : passes) out += fmt::format("  {:<19} {:<9} {}\n", p.stage, to_string(p.status), p.detail);
  return out;
}

namespace {

// What selects a recording: everything the recorded host decisions depended
// on that can change between calls without the step's code changing.
struct Signature {
  std::vector<int64_t> key;
  bool operator<(const Signature& o) const { return key < o.key; }
  bool operator==(const Signature& o) const { return key == o.key; }
};

// The passes, in the order, over a finished recording.
CaptureEvidence run_passes(replay::Recorder& rec) {
  CaptureEvidence ev;
  const auto& launches = rec.launches();
  for (const replay::Launch& l : launches) (l.host_effect ? ev.host_effects : ev.launches)++;
  ev.buffers = int64_t(rec.storages().size());
  for (const auto& s : rec.storages()) ev.buffer_bytes += int64_t(s->nbytes());

  const bool rejected = rec.rejected();
  const replay::Rejection& r = rec.rejection();
  auto validation = [&](const char* stage) {
    if (rejected && r.stage == stage)
      ev.passes.push_back({stage, PassStatus::Rejected, r.reason});
    else if (rejected)
      ev.passes.push_back({stage, PassStatus::NotRun, "not reached: the recording was rejected"});
    else if (std::string(stage) == "SemanticValidation")
      ev.passes.push_back({stage, PassStatus::Applied, "no host read of tensor values during the step"});
    else
      ev.passes.push_back({stage, PassStatus::Applied,
                           fmt::format("every kernel launch has a replay rule; {} launches, {} gradient assignments",
                                       ev.launches, ev.host_effects)});
  };
  validation("SemanticValidation");
  validation("ReplaySafety");
  if (rejected) {
    for (const char* stage : {"DeadOpRemoval", "Fusion", "MemoryPlanning", "KernelSelection", "CommandRecording"})
      ev.passes.push_back({stage, PassStatus::NotRun, "not reached: the recording was rejected"});
    return ev;
  }
  ev.passes.push_back({"DeadOpRemoval", PassStatus::NotRun,
                       "not implemented: launches do not declare which buffers they read and which they write, "
                       "so a launch whose outputs are never read cannot be proven dead"});
  ev.passes.push_back({"Fusion", PassStatus::NotRun,
                       "not implemented: elementwise chains and bias/activation post-ops run as recorded "
                       "(linear and addmm already add their bias inside the oneDNN GEMM, an eager fusion)"});
  // Memory: every buffer keeps the address it had while recording (the
  // recording holds it), so a replay allocates nothing. A lifetime-based
  // arena is analysed, not applied: the peak of the bytes live at once (a
  // buffer from its first launch to its last) is what one would need.
  {
    const auto& storages = rec.storages();
    std::map<const Storage*, std::pair<size_t, size_t>> life;  // first, last launch
    for (size_t i = 0; i < launches.size(); ++i)
      for (const Storage* s : launches[i].touched) {
        auto [it, fresh] = life.try_emplace(s, i, i);
        if (!fresh) it->second.second = i;
      }
    std::vector<int64_t> delta(launches.size() + 1, 0);
    for (const auto& s : storages) {
      auto it = life.find(s.get());
      if (it == life.end()) continue;
      delta[it->second.first] += int64_t(s->nbytes());
      delta[it->second.second + 1] -= int64_t(s->nbytes());
    }
    int64_t live = 0, peak = 0;
    for (int64_t d : delta) peak = std::max(peak, live += d);
    ev.passes.push_back({"MemoryPlanning", PassStatus::Analyzed,
                         fmt::format("buffers fixed at record time, no allocation in a replay; {} buffers hold {} "
                                     "bytes, a lifetime-based arena would need {} (not applied)",
                                     ev.buffers, ev.buffer_bytes, peak)});
  }
  ev.passes.push_back({"KernelSelection", PassStatus::Inherited,
                       "primitives chosen per shape at the first launch by the backend's caches (oneDNN "
                       "primitives, kiln's small-GEMM path, the ISA copy); a replay re-enters them"});
  ev.passes.push_back({"CommandRecording", PassStatus::Applied,
                       fmt::format("{} launches and {} gradient assignments replayed in order", ev.launches,
                                   ev.host_effects)});
  ev.replayable = true;
  return ev;
}

}  // namespace

struct CompiledStep::Impl {
  struct Entry {
    Signature sig;
    std::vector<Tensor> inputs;   // the recorded input buffers (contiguous)
    std::vector<Tensor> outputs;  // the recorded outputs (detached)
    std::unique_ptr<replay::Recorder> rec;  // null: rejected, run eagerly
  };

  Fn fn;
  CompileOptions opts;
  std::vector<const Generator*> generators;
  std::vector<nn::ParameterList> params;  // per module, for the grad-state part of the signature
  std::deque<Entry> entries;              // most recent first
  CaptureEvidence evidence;
  Mode last = Mode::Eager;
  int64_t recordings = 0, replays = 0, eager = 0;

  Signature signature(const std::vector<Tensor>& inputs) const {
    Signature s;
    s.key.reserve(inputs.size() * 4 + 8);
    s.key.push_back(GradMode::is_enabled());
    for (const Tensor& t : inputs) {
      KILN_CHECK(t.defined(), "CompiledStep", "input {} is an undefined tensor", &t - inputs.data());
      s.key.push_back(int64_t(t.dtype()));
      s.key.push_back(t.dim());
      for (int64_t d : t.shape()) s.key.push_back(d);
    }
    for (size_t m = 0; m < opts.modules.size(); ++m) {
      s.key.push_back(opts.modules[m]->is_training());
      // Whether each parameter holds a gradient decides AccumulateGrad's
      // path (assign or add), a host decision the recording fixed.
      int64_t bits = 0, n = 0;
      for (const nn::Parameter& p : params[m]) {
        bits = (bits << 1) | int64_t(p.value().grad().defined());
        if (++n == 62) {
          s.key.push_back(bits);
          bits = n = 0;
        }
      }
      s.key.push_back(bits);
    }
    return s;
  }

  std::vector<Tensor> record(Signature sig, const std::vector<Tensor>& inputs) {
    Entry e;
    e.sig = std::move(sig);
    {
      NoGradGuard no_grad;
      for (const Tensor& t : inputs) e.inputs.push_back(clone(t));  // contiguous buffers the replays refill
    }
    auto rec = std::make_unique<replay::Recorder>(generators);
    std::vector<Tensor> outs;
    {
      replay::RecordingScope scope(*rec);
      outs = fn(e.inputs);  // an exception leaves no recording behind
    }
    ++recordings;
    evidence = run_passes(*rec);
    if (opts.print_evidence) std::fputs(evidence.str().c_str(), stderr);
    for (Tensor& t : outs)
      if (t.defined()) t = t.detach();
    if (evidence.replayable) {
      e.outputs = outs;
      e.rec = std::move(rec);
      last = Mode::Recorded;
    } else {
      e.inputs.clear();  // nothing to refill: this signature runs eagerly
      last = Mode::Eager;
    }
    entries.push_front(std::move(e));
    while (entries.size() > std::max<size_t>(opts.max_recordings, 1)) entries.pop_back();
    return outs;
  }
};

CompiledStep::CompiledStep(Fn fn, CompileOptions options) : impl_(std::make_unique<Impl>()) {
  KILN_CHECK(bool(fn), "CompiledStep", "the step function is empty");
  impl_->fn = std::move(fn);
  impl_->opts = std::move(options);
  for (nn::Module* m : impl_->opts.modules) {
    KILN_CHECK(m != nullptr, "CompiledStep", "a module in CompileOptions::modules is null");
    impl_->params.push_back(m->parameters());
    for (auto& [name, g] : m->named_generators()) impl_->generators.push_back(g);
  }
  for (Generator* g : impl_->opts.generators) {
    KILN_CHECK(g != nullptr, "CompiledStep", "a generator in CompileOptions::generators is null");
    impl_->generators.push_back(g);
  }
}

CompiledStep::~CompiledStep() = default;
CompiledStep::CompiledStep(CompiledStep&&) noexcept = default;
CompiledStep& CompiledStep::operator=(CompiledStep&&) noexcept = default;

std::vector<Tensor> CompiledStep::operator()(const std::vector<Tensor>& inputs) {
  Impl& s = *impl_;
  KILN_CHECK(!replay::recording(), "CompiledStep", "a compiled step cannot run inside another recording");
  for (const nn::ParameterList& p : s.params) p.check("CompiledStep");  // parameters replaced: Rebuild
  Signature sig = s.signature(inputs);
  auto it = std::find_if(s.entries.begin(), s.entries.end(), [&](const Impl::Entry& e) { return e.sig == sig; });
  if (it == s.entries.end()) return s.record(std::move(sig), inputs);
  if (!it->rec) {
    ++s.eager;
    s.last = Mode::Eager;
    return s.fn(inputs);
  }
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < inputs.size(); ++i) copy_(it->inputs[i], inputs[i]);
    it->rec->replay();
  }
  ++s.replays;
  s.last = Mode::Replayed;
  if (it != s.entries.begin()) std::rotate(s.entries.begin(), it, it + 1);  // most recent first
  return s.entries.front().outputs;
}

CompiledStep::Mode CompiledStep::last_mode() const { return impl_->last; }
int64_t CompiledStep::recordings() const { return impl_->recordings; }
int64_t CompiledStep::replays() const { return impl_->replays; }
int64_t CompiledStep::eager_calls() const { return impl_->eager; }
const CaptureEvidence& CompiledStep::evidence() const { return impl_->evidence; }
void CompiledStep::request_recapture() { impl_->entries.clear(); }

Tensor update_guarded(const Tensor& loss, optim::Optimizer& opt) {
  Tensor applied = Tensor::empty({}, kBool);
  loss.backward();
  optim::Optimizer* o = &opt;
  auto apply = [loss, o, applied] {
    const bool ok = std::isfinite(loss.item<double>()) && grads_finite(*o);
    if (ok) o->step();
    applied.data<bool>()[0] = ok;
  };
  // One launch: the finiteness test reads values, so it runs again at replay.
  if (replay::active()) replay::launch("update_guarded", apply);
  else apply();
  opt.zero_grad();
  return applied;
}

void CompiledTask::init(CompileOptions options) {
  if (options.modules.empty()) options.modules.push_back(&model());
  step_ = std::make_unique<CompiledStep>(
      [this](const std::vector<Tensor>& in) {
        Tensor logits = forward()(in[0]);  // [B, C]
        Tensor loss = cross_entropy(logits, in[1]);
        Tensor applied = update_guarded(loss, optimizer());
        return std::vector<Tensor>{loss, logits, applied};
      },
      std::move(options));
}

StepResult CompiledTask::training_step(const data::Batch& batch) {
  std::vector<Tensor> out = (*step_)({batch.input, batch.target});
  // The predictions before the update, as classification_step reports them.
  return {out[0].item<double>(), batch.size(), count_correct(out[1], batch.target), out[2].item<bool>()};
}

std::string CompiledTask::recapture() {
  step_->request_recapture();
  return "the compiled step records again at the next step";
}

}  // namespace kiln::train
