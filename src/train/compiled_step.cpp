// CompiledStep: a signature cache of recordings (kiln/train/compiled_step.h,
// docs/compile.md). The recorder itself is core's (kiln/core/replay.h); this
// file decides when to record, runs the passes over a recording and replays.
#include "kiln/train/compiled_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "kiln/core/allocator.h"
#include "kiln/core/generator.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/node.h"
#include "kiln/core/replay.h"
#include "kiln/core/replay_fusion.h"
#include "kiln/core/storage.h"
#include "kiln/nn/module.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/shape.h"
#include "kiln/optim/optimizer.h"
#include "kiln/train/metrics.h"
#include "kiln/train/steps.h"
#include "src/backend/cpu/elementwise/elementwise.h"
#include "src/backend/cpu/linalg/matmul.h"

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

// NOTE [Buffers of a recording]
// A tensor every reference of which is held by the recording's closures
// (replay::ImplUse::closure_refs == its use count) cannot be reached from
// outside the recording any more: no host code holds it, so no later op can
// name it, and nothing after the step can read it. A storage is a
// *temporary* when every tensor on it is such a tensor and nothing else
// holds the storage: the parameters, the optimizer's state, the inputs, the
// outputs and gradients left assigned after the step are not. Temporaries
// are what eager frees during or at the end of a step; the passes below may
// drop the launches that only write them, let a copy share their memory, and
// place them by lifetime in one arena.
struct Buffers {
  std::unordered_map<const Storage*, std::vector<std::shared_ptr<TensorImpl>>> impls;  // alive tensors per storage
  std::unordered_set<const Storage*> temporary;
  std::vector<const Storage*> orphans;  // no tensor on them any more: a kernel's scratch made inside a launch
};

Buffers analyse(const replay::Recorder& rec) {
  Buffers b;
  std::unordered_set<const Storage*> external;
  for (const auto& [key, use] : rec.impls()) {
    std::shared_ptr<TensorImpl> sp = use.impl.lock();
    if (!sp) continue;
    if (sp.use_count() - 1 != use.closure_refs) external.insert(sp->storage.get());  // -1: sp itself
    const Storage* st = sp->storage.get();
    b.impls[st].push_back(std::move(sp));
  }
  for (const auto& st : rec.storages()) {
    auto it = b.impls.find(st.get());
    const long tensors = it == b.impls.end() ? 0 : long(it->second.size());
    // One reference is the recording's list; each tensor on it holds one.
    if (st.use_count() != 1 + tensors) continue;
    if (tensors == 0) b.orphans.push_back(st.get());
    else if (!external.count(st.get())) b.temporary.insert(st.get());
  }
  return b;
}

// The step's autograd graph after the step: a recorded closure holds the
// tensors its kernel reached, and a tensor an op made holds its grad_fn, so
// the closures keep every Node of the step alive, and with each Node what its
// vjp captured besides its saved tensors (max pooling's argmax taps, ...):
// memory eager frees at the end of the step, which the passes would see as
// held from outside. A tensor every reference of which is a closure's is
// never named again (NOTE [Buffers of a recording]), so its grad_fn is never
// used: dropping it frees the graph. Repeated until nothing changes (a freed
// Node may leave more tensors held by closures alone).
void release_graph(const replay::Recorder& rec) {
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& [key, use] : rec.impls()) {
      std::shared_ptr<TensorImpl> sp = use.impl.lock();
      if (!sp || !sp->autograd || !sp->autograd->grad_fn || sp.use_count() - 1 != use.closure_refs) continue;
      sp->autograd->grad_fn.reset();
      changed = true;
    }
  }
}

// The Fusion pass's note of each launch (-1: none), kept parallel to the
// recorder's launches by every pass that drops some.
using NoteIndex = std::vector<int>;

void erase_launches(replay::Recorder& rec, const std::vector<char>& drop, NoteIndex& note_of) {
  rec.erase_launches(drop);
  NoteIndex kept;
  for (size_t i = 0; i < note_of.size(); ++i)
    if (i >= drop.size() || !drop[i]) kept.push_back(note_of[i]);
  note_of = std::move(kept);
}

// Dead-op removal, then copy elision (both drop launches).
PassReport remove_dead_launches(replay::Recorder& rec, NoteIndex& note_of) {
  int64_t dead = 0, elided = 0, elided_bytes = 0;
  {
    // A pure launch (a kernel whose only effects are on the memory it
    // reaches) is dead when what it writes (Launch::writes: its fresh
    // outputs and what an op marked written in place) is temporaries or
    // scratch that no later launch reaches: nothing can observe its writes.
    // Conservatively, a launch that reaches anything visible outside the
    // recording (a parameter, a module's buffer, an input) is kept, as is
    // one that writes nothing (a check that throws on a bad index).
    Buffers b = analyse(rec);
    std::unordered_set<const Storage*> invisible(b.temporary.begin(), b.temporary.end());
    invisible.insert(b.orphans.begin(), b.orphans.end());
    auto& launches = rec.launches();
    std::vector<char> drop(launches.size(), 0);
    std::unordered_set<const Storage*> needed;
    for (size_t i = launches.size(); i-- > 0;) {
      const replay::Launch& l = launches[i];
      bool is_dead = l.pure && !l.writes.empty();
      for (const Storage* st : l.touched)
        if (!invisible.count(st)) is_dead = false;
      for (const Storage* st : l.writes)
        if (needed.count(st)) is_dead = false;
      if (is_dead) {
        drop[i] = 1;
        ++dead;
      } else {
        needed.insert(l.touched.begin(), l.touched.end());
      }
    }
    b = {};
    if (dead) erase_launches(rec, drop, note_of);
  }
  {
    // Copy elision: a gradient copied (AccumulateGrad's clone while
    // recording, where eager keeps the tensor) from a temporary that no later
    // launch reaches: the copy's destination takes the source's memory and
    // the copy goes, as eager's AccumulateGrad keeps its incoming tensor.
    Buffers b = analyse(rec);
    auto& launches = rec.launches();
    std::vector<char> drop(launches.size(), 0);
    auto lock = [&](const TensorImpl* p) -> std::shared_ptr<TensorImpl> {
      auto it = rec.impls().find(p);
      return it == rec.impls().end() ? nullptr : it->second.impl.lock();
    };
    for (size_t i = 0; i < launches.size(); ++i) {
      replay::Launch& c = launches[i];
      if (!c.copy_src || !c.copy_dst) continue;
      std::shared_ptr<TensorImpl> src = lock(c.copy_src), dst = lock(c.copy_dst);
      if (!src || !dst) continue;
      Storage* s_src = src->storage.get();
      Storage* s_dst = dst->storage.get();
      if (s_src == s_dst || !b.temporary.count(s_src)) continue;
      Tensor ts(src), td(dst);
      if (!ts.is_contiguous() || !td.is_contiguous() || td.storage_offset() != 0 || dst->is_view ||
          ts.shape() != td.shape() || ts.dtype() != td.dtype() || s_dst->nbytes() != size_t(td.nbytes()) ||
          s_src->device() != s_dst->device())
        continue;
      if (c.touched.size() != 2 || !std::count(c.touched.begin(), c.touched.end(), s_src) ||
          !std::count(c.touched.begin(), c.touched.end(), s_dst))
        continue;
      // dst alone on its storage (no view of it), fresh at the copy; src not
      // reached after it.
      auto dit = b.impls.find(s_dst);
      if (dit == b.impls.end() || dit->second.size() != 1 || rec.storages().empty()) continue;
      bool ok = true;
      for (size_t j = 0; j < launches.size() && ok; ++j) {
        if (j == i || drop[j]) continue;
        const auto& t = launches[j].touched;
        if (j < i && std::count(t.begin(), t.end(), s_dst)) ok = false;
        if (j > i && std::count(t.begin(), t.end(), s_src)) ok = false;
      }
      if (!ok) continue;
      long holders = 0;  // the recording's list and dst; anything else shares s_dst
      for (const auto& st : rec.storages())
        if (st.get() == s_dst) holders = st.use_count();
      if (holders != 2) continue;
      drop[i] = 1;
      ++elided;
      elided_bytes += int64_t(s_dst->nbytes());
      std::shared_ptr<Storage> keep = src->storage;
      dst->storage = keep;
      dst->offset = src->offset;
      rec.replace_storage(s_dst, keep);  // frees s_dst
      b.impls.erase(s_dst);
    }
    b = {};
    if (elided) erase_launches(rec, drop, note_of);
  }
  if (!dead && !elided)
    return {"DeadOpRemoval", PassStatus::Analyzed,
            "no launch writes only buffers nothing reads afterwards, no gradient copy can be elided"};
  return {"DeadOpRemoval", PassStatus::Applied,
          fmt::format("{} dead launches dropped (pure kernels whose outputs nothing reads); {} gradient copies "
                      "elided ({} bytes), the gradient keeping its producer's buffer as eager does",
                      dead, elided, elided_bytes)};
}

// Fusion: a linear (GEMM + bias) or a convolution (+ bias) whose output only
// feeds one elementwise activation (relu, tanh, sigmoid, ...; an activation
// whose backward reads its output, not its input) becomes one launch: the
// GEMM or the convolution writes the activation's output buffer and kiln's
// own activation kernel runs on it in place, while it is (partly) in cache.
// The pre-activation buffer goes, as does a launch. The producer is eager's
// kernel call and the activation is the kernel eager runs, on the same f32
// values in the same order, so the replay stays bitwise eager's (oneDNN's
// eltwise post-ops are not used: see the pass's detail).
PassReport fuse_linear_activations(replay::Recorder& rec, const std::vector<replay::FusionNote>& notes,
                                   NoteIndex& note_of, const std::string& chains) {
  using replay::FusionNote;
  Buffers b = analyse(rec);
  auto& launches = rec.launches();
  const size_t n = launches.size();
  auto touches = [&](size_t k, const Storage* st) {
    const auto& t = launches[k].touched;
    return std::find(t.begin(), t.end(), st) != t.end();
  };
  struct Fused {
    size_t producer, act;
    replay::Launch launch;
    std::vector<std::shared_ptr<TensorImpl>> reached;
  };
  std::vector<Fused> fused;
  std::map<std::string, int64_t> by_op, by_conv;
  int64_t kept_input = 0, saved_bytes = 0, linears = 0, convs = 0;
  std::vector<char> used(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (note_of[i] < 0 || used[i]) continue;
    const FusionNote& ln = notes[size_t(note_of[i])];
    const bool conv = ln.kind == FusionNote::Kind::Conv;
    if (ln.kind != FusionNote::Kind::Linear && !(conv && ln.produce)) continue;
    std::shared_ptr<TensorImpl> a = ln.a.lock(), w = ln.b.lock(), o = ln.out.lock(), bias = ln.bias.lock();
    if (!a || !w || !o || (!ln.bias.expired() && !bias)) continue;
    Tensor pre(o);
    Storage* so = o->storage.get();
    // f32 only: a bf16 GEMM or convolution rounds its f32 result once, and
    // the activation of the rounded value is not always the rounding of the
    // activation (-0).
    if (pre.dtype() != kF32 || !pre.is_contiguous() || !b.temporary.count(so) || b.impls[so].size() != 1) continue;
    size_t j = i + 1;
    while (j < n && !touches(j, so)) ++j;
    if (j == n || note_of[j] < 0 || used[j]) continue;
    const FusionNote& un = notes[size_t(note_of[j])];
    if (un.kind != FusionNote::Kind::Elementwise) continue;
    std::shared_ptr<TensorImpl> x = un.a.lock(), y = un.out.lock();
    if (!x || !y || x.get() != o.get()) continue;
    Tensor act(y);
    Storage* sy = y->storage.get();
    if (sy == so || act.dtype() != kF32 || !act.is_contiguous() || act.shape() != pre.shape()) continue;
    bool later_read = false, between = false;
    for (size_t k = j + 1; k < n && !later_read; ++k) later_read = touches(k, so);
    for (size_t k = i + 1; k < j && !between; ++k) between = touches(k, sy);
    if (later_read) {
      ++kept_input;  // gelu, silu: the backward reads the pre-activation
      continue;
    }
    // Nothing between the two, nor the producer itself, may reach the
    // activation's buffer: the fused launch writes it in the producer's place.
    if (between || touches(i, sy)) continue;
    used[i] = used[j] = 1;
    Tensor ta(a), tw(w), tb = bias ? Tensor(bias) : Tensor();
    replay::Launch f;
    f.pure = true;
    if (conv) {
      f.op = "conv+activation";
      f.run = [ta, tw, act, tb, produce = ln.produce, run = un.run] {
        produce(ta, tw, tb.defined() ? &tb : nullptr, act);  // eager's convolution call, into act
        run(act, act);  // in place: elementwise, the same values as out of place
      };
      ++convs;
      ++by_conv[fmt::format("{}+{}", launches[i].op, launches[j].op)];
    } else {
      f.op = "linear+activation";
      f.run = [ta, tw, act, tb, run = un.run] {
        backend::cpu::MatmulEpilogue e;
        if (tb.defined()) e.bias = &tb;
        backend::cpu::matmul(ta, tw, act, e);
        run(act, act);  // in place: elementwise, the same values as out of place
      };
      ++linears;
      ++by_op[launches[j].op];
    }
    for (Storage* st : launches[i].touched) {
      Storage* t = st == so ? sy : st;
      if (std::find(f.touched.begin(), f.touched.end(), t) == f.touched.end()) f.touched.push_back(t);
    }
    f.writes = {sy};
    std::vector<std::shared_ptr<TensorImpl>> reached{a, w, y};
    if (bias) reached.push_back(bias);
    saved_bytes += int64_t(so->nbytes());
    fused.push_back({i, j, std::move(f), std::move(reached)});
  }
  std::string rejected =
      "oneDNN eltwise post-ops not used: kiln's activation kernels are what eager runs (relu keeps NaN and -0 "
      "where a max with 0 would not; gelu/tanh/sigmoid approximations differ), so a post-op would not be "
      "bitwise eager's";
  if (fused.empty())
    return {"Fusion", chains.empty() ? PassStatus::Analyzed : PassStatus::Applied,
            fmt::format("{}no linear or convolution whose output only feeds an f32 activation ({} pairs kept: the "
                        "backward reads the pre-activation); {}",
                        chains, kept_input, rejected)};
  // Each fused launch is appended (its references counted), then takes the
  // producer's place; the producer and the activation go.
  std::vector<char> drop(n + fused.size(), 0);
  for (size_t q = 0; q < fused.size(); ++q) {
    rec.append(std::move(fused[q].launch), fused[q].reached);
    fused[q].reached.clear();
    std::swap(rec.launches()[fused[q].producer], rec.launches()[n + q]);
    drop[n + q] = 1;  // the producer, now at the end
    drop[fused[q].act] = 1;
  }
  for (size_t q = 0; q < fused.size(); ++q) note_of.push_back(-1);
  for (const Fused& q : fused) note_of[q.producer] = -1;  // the fused launch has no note
  b = {};
  erase_launches(rec, drop, note_of);
  auto list = [](const std::map<std::string, int64_t>& m) {
    std::string ops;
    for (const auto& [op, count] : m) ops += fmt::format("{}{} x{}", ops.empty() ? "" : ", ", op, count);
    return ops;
  };
  std::string conv_part =
      convs ? fmt::format("{} convolution + activation pairs fused into one launch each ({}): the convolution "
                          "writes the activation's buffer and the activation runs in place on it; ",
                          convs, list(by_conv))
            : std::string();
  return {"Fusion", PassStatus::Applied,
          fmt::format("{}{} linear + activation pairs fused into one launch each ({}): the GEMM writes the "
                      "activation's buffer and the activation runs in place on it; {}{} pre-activation buffers "
                      "({} bytes) gone; {} pairs kept (the backward reads the pre-activation). Rejected: {}",
                      chains, linears, list(by_op), conv_part, fused.size(), saved_bytes, kept_input, rejected)};
}

// Elementwise chains: f1 (x) -> t1, f2 (t1) -> t2, ..., each an f32
// elementwise launch on one tensor of one shape (unary ops, ops with a
// scalar), where each intermediate is a temporary alone on its buffer that
// only the next link reads. The chain becomes one launch writing the last
// link's buffer: the first kernel from x into it, the others in place on it
// (each kernel is eager's, on the same values: bitwise eager's). The
// intermediates' buffers go. Returns the detail ("" when none); the chain's
// launch gets a note of its own (input x, output the last buffer, the links
// in order), so that a linear feeding it is fused with it afterwards.
std::string fuse_elementwise_chains(replay::Recorder& rec, std::vector<replay::FusionNote>& notes,
                                    NoteIndex& note_of) {
  using replay::FusionNote;
  Buffers b = analyse(rec);
  auto& launches = rec.launches();
  const size_t n = launches.size();
  auto touches = [&](size_t k, const Storage* st) {
    const auto& t = launches[k].touched;
    return std::find(t.begin(), t.end(), st) != t.end();
  };
  auto elementwise = [&](size_t k) -> const FusionNote* {
    if (k >= n || note_of[k] < 0) return nullptr;
    const FusionNote& e = notes[size_t(note_of[k])];
    return e.kind == FusionNote::Kind::Elementwise ? &e : nullptr;
  };
  auto plain = [](const std::shared_ptr<TensorImpl>& p, const Shape& shape) {
    Tensor t(p);
    return t.dtype() == kF32 && t.is_contiguous() && t.shape() == shape;
  };
  struct Chain {
    std::vector<size_t> links;
    std::shared_ptr<TensorImpl> in, out;
    std::vector<std::function<void(const Tensor&, const Tensor&)>> runs;
    int64_t saved = 0;
  };
  std::vector<Chain> chains;
  std::vector<char> used(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const FusionNote* first = elementwise(i);
    if (!first || used[i]) continue;
    Chain c;
    c.in = first->a.lock();
    c.out = first->out.lock();
    if (!c.in || !c.out) continue;
    const Shape shape = Tensor(c.out).shape();
    if (!plain(c.in, shape) || !plain(c.out, shape)) continue;
    c.links = {i};
    c.runs = {first->run};
    for (;;) {
      Storage* so = c.out->storage.get();
      if (!b.temporary.count(so) || b.impls[so].size() != 1) break;
      size_t j = c.links.back() + 1;
      while (j < n && !touches(j, so)) ++j;
      const FusionNote* next = elementwise(j);
      if (!next || used[j]) break;
      std::shared_ptr<TensorImpl> x = next->a.lock(), y = next->out.lock();
      if (!x || !y || x.get() != c.out.get() || !plain(y, shape)) break;
      Storage* sy = y->storage.get();
      if (sy == so || sy == c.in->storage.get()) break;
      bool later = false, between = false;
      for (size_t k = j + 1; k < n && !later; ++k) later = touches(k, so);
      for (size_t k = i + 1; k < j && !between; ++k) between = touches(k, sy);
      if (later || between) break;
      c.saved += int64_t(so->nbytes());
      c.links.push_back(j);
      c.runs.push_back(next->run);
      c.out = std::move(y);
    }
    if (c.links.size() < 2) continue;
    for (size_t l : c.links) used[l] = 1;
    chains.push_back(std::move(c));
  }
  if (chains.empty()) return "";
  std::vector<char> drop(n + chains.size(), 0);
  const size_t count = chains.size();
  int64_t links = 0, saved = 0;
  for (size_t q = 0; q < chains.size(); ++q) {
    Chain& c = chains[q];
    links += int64_t(c.links.size());
    saved += c.saved;
    replay::Launch f;
    f.op = "elementwise chain";
    f.pure = true;
    Storage* sx = c.in->storage.get();
    Storage* sy = c.out->storage.get();
    f.touched = {sx, sy};
    f.writes = {sy};
    Tensor x(c.in), y(c.out);
    f.run = [x, y, runs = c.runs] {
      runs[0](y, x);
      for (size_t k = 1; k < runs.size(); ++k) runs[k](y, y);  // in place, as eager's kernel out of place
    };
    // The chain's note: a linear feeding it fuses with it (fuse_linear_activations).
    FusionNote note;
    note.kind = FusionNote::Kind::Elementwise;
    note.a = c.in;
    note.out = c.out;
    note.run = [runs = c.runs](const Tensor& o, const Tensor& i) {
      runs[0](o, i);
      for (size_t k = 1; k < runs.size(); ++k) runs[k](o, o);
    };
    notes.push_back(std::move(note));
    rec.append(std::move(f), {c.in, c.out});
    const size_t head = c.links.front();
    std::swap(rec.launches()[head], rec.launches()[n + q]);
    note_of.push_back(note_of[head]);  // the head's note goes with its launch to the end
    note_of[head] = int(notes.size() - 1);
    drop[n + q] = 1;
    for (size_t k = 1; k < c.links.size(); ++k) drop[c.links[k]] = 1;
  }
  chains.clear();
  b = {};
  erase_launches(rec, drop, note_of);
  return fmt::format("{} elementwise chains ({} launches) run as one launch each, in place on the last buffer; "
                     "{} intermediate bytes gone. ",
                     count, links, saved);
}

// A tensor that is all of its storage, contiguous: its element i is the
// storage's element i.
bool whole_buffer(const std::shared_ptr<TensorImpl>& impl) {
  const Tensor t(impl);
  return t.is_contiguous() && t.storage_offset() == 0 && size_t(t.nbytes()) == impl->storage->nbytes();
}

// Memory planning: the temporaries placed by lifetime in one arena.
// `held_bytes`: what the recording holds afterwards (the arena counted once).
//
// NOTE [Outputs in place of dead inputs]: an elementwise launch (a unary op,
// an op with a scalar, an elementwise chain, an op of two same-shape tensors
// such as relu's or gelu's gradient or a residual add) computes out[i] from
// its inputs' element i alone, and its kernel reads element i before it
// writes it: run in place on an input it computes what it computes out of
// place (the elementwise-chain fusion rests on the same property). So when
// such a launch's output is fresh there and one of its inputs is a temporary
// read there for the last time, of the same dtype, shape and size, each
// alone and whole on its buffer, the two share one place in the arena: eager
// holds both buffers at that launch, the replay one. The gradient of an
// activation written over the activation's saved output (relu, tanh) is the
// typical case; so is a residual add's output over a dead operand.
PassReport plan_memory(replay::Recorder& rec, int64_t& held_bytes, const std::vector<replay::FusionNote>& notes,
                       const NoteIndex& note_of) {
  using replay::FusionNote;
  Buffers b = analyse(rec);
  for (const Storage* o : b.orphans) rec.replace_storage(o, nullptr);  // a kernel's scratch: nothing needs it
  const auto& launches = rec.launches();
  struct Life {
    const Storage* st;
    size_t first, last, bytes;
    size_t group = 0;  // the place it shares (NOTE [Outputs in place of dead inputs])
  };
  std::unordered_map<const Storage*, size_t> index;
  std::vector<Life> lives;
  for (size_t i = 0; i < launches.size(); ++i)
    for (const Storage* st : launches[i].touched) {
      if (!b.temporary.count(st)) continue;
      auto [it, fresh] = index.try_emplace(st, lives.size());
      if (fresh) lives.push_back({st, i, i, (st->nbytes() + 63) / 64 * 64, lives.size()});
      else lives[it->second].last = i;
    }
  // Places: one per buffer, except where an output takes a dead input's.
  struct Place {
    size_t first, last, bytes, offset = 0;
    std::vector<size_t> members;
  };
  std::vector<Place> places;
  for (size_t k = 0; k < lives.size(); ++k) places.push_back({lives[k].first, lives[k].last, lives[k].bytes, 0, {k}});
  int64_t in_place = 0, in_place_bytes = 0;
  // Other tensors on the two buffers (views made for a kernel's arguments,
  // a reshape of the output) are fine: the input's buffer is read at this
  // launch only through the noted operands and by no launch after it, the
  // output's is fresh here. What matters is that out[i] and in[i] are the
  // same element of their buffers.
  // KILN_COMPILE_INPLACE=0: none (to measure what they bring, A B A B).
  const char* inplace_env = std::getenv("KILN_COMPILE_INPLACE");
  const bool inplace = !(inplace_env && std::string(inplace_env) == "0");
  for (size_t k = 0; inplace && k < launches.size() && k < note_of.size(); ++k) {
    if (note_of[k] < 0) continue;
    const FusionNote& nt = notes[size_t(note_of[k])];
    if (nt.kind != FusionNote::Kind::Elementwise && nt.kind != FusionNote::Kind::Binary) continue;
    std::shared_ptr<TensorImpl> out = nt.out.lock();
    if (!out) continue;
    auto oi = index.find(out->storage.get());
    if (oi == index.end()) continue;
    Life& lo = lives[oi->second];
    Place& po = places[lo.group];
    if (lo.first != k || po.members.size() != 1 || !whole_buffer(out)) continue;  // fresh here
    const Tensor to(out);
    for (const auto* wp : {&nt.a, &nt.b}) {
      std::shared_ptr<TensorImpl> in = wp->lock();
      if (!in || in->storage == out->storage) continue;
      // The other operand must not read the input's buffer at other indices (a + a.T).
      const auto* other = wp == &nt.a ? &nt.b : &nt.a;
      std::shared_ptr<TensorImpl> o2 = other->lock();
      if (o2 && o2 != in && o2->storage == in->storage) continue;
      auto ii = index.find(in->storage.get());
      if (ii == index.end()) continue;
      const Life& li = lives[ii->second];
      Place& pi = places[li.group];
      const Tensor ti(in);
      // Read here for the last time (by the whole place: its last member),
      // the same elements in the same order.
      if (li.last != k || pi.last != k || li.bytes != lo.bytes || !whole_buffer(in) || ti.dtype() != to.dtype() ||
          ti.shape() != to.shape())
        continue;
      pi.last = lo.last;
      pi.members.push_back(oi->second);
      po.members.clear();
      lo.group = li.group;
      ++in_place;
      in_place_bytes += int64_t(lo.bytes);
      break;
    }
  }
  std::vector<size_t> live_places;
  for (size_t p = 0; p < places.size(); ++p)
    if (!places[p].members.empty()) live_places.push_back(p);
  // The lower bound of any placement of these places: the most bytes alive at one launch.
  size_t most_live = 0, peak_at = 0;
  {
    std::vector<int64_t> delta(launches.size() + 1, 0);
    for (size_t p : live_places) {
      delta[places[p].first] += int64_t(places[p].bytes);
      delta[places[p].last + 1] -= int64_t(places[p].bytes);
    }
    int64_t live = 0;
    for (size_t i = 0; i < delta.size(); ++i)
      if (size_t(live += delta[i]) > most_live) most_live = size_t(live), peak_at = i;
  }
  // Greedy placement: in a given order, each place goes to a free gap among
  // the placed ones whose lifetimes overlap its own: the lowest that fits
  // (first fit) or the tightest (best fit). No order is best for every
  // step, so a few are tried and the smallest arena kept (the step's
  // buffers are a few hundred at most; this runs once per recording).
  size_t separate = 0;
  for (const Life& l : lives) separate += l.bytes;
  auto place_all = [&](const std::vector<size_t>& order, bool best_fit, std::vector<size_t>& offset) {
    size_t total = 0;
    std::vector<size_t> placed;
    for (size_t k : order) {
      const Place& l = places[k];
      std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of placed places alive at once
      for (size_t p : placed) {
        const Place& o = places[p];
        if (o.first <= l.last && l.first <= o.last) busy.emplace_back(offset[p], offset[p] + o.bytes);
      }
      std::sort(busy.begin(), busy.end());
      size_t at = SIZE_MAX, gap = SIZE_MAX, end = 0;
      for (auto [lo, hi] : busy) {
        if (lo >= end + l.bytes && (!best_fit || lo - end < gap)) {
          at = end, gap = lo - end;
          if (!best_fit) break;
        }
        end = std::max(end, hi);
      }
      if (at == SIZE_MAX) at = end;  // above every placed one
      offset[k] = at;
      total = std::max(total, at + l.bytes);
      placed.push_back(k);
    }
    return total;
  };
  std::vector<std::vector<size_t>> orders(4, live_places);
  auto by = [&](std::vector<size_t>& o, auto key) {
    std::stable_sort(o.begin(), o.end(), [&](size_t a, size_t c) { return key(places[a]) > key(places[c]); });
  };
  by(orders[0], [](const Place& p) { return double(p.bytes); });                                   // largest first
  by(orders[1], [](const Place& p) { return double(p.bytes) * double(p.last - p.first + 1); });  // most byte-launches
  by(orders[2], [](const Place& p) { return double(p.last - p.first); });                         // longest lived
  by(orders[3], [](const Place& p) { return -double(p.first) - 1e-12 * double(p.bytes); });      // earliest first
  size_t total = SIZE_MAX;
  std::vector<size_t> offset(places.size(), 0), trial(places.size(), 0), best_order;
  bool best_fit_used = false;
  for (const auto& order : orders)
    for (bool best_fit : {false, true}) {
      const size_t t = place_all(order, best_fit, trial);
      if (t < total) total = t, offset = trial, best_order = order, best_fit_used = best_fit;
    }
  // Then a local search over the order (deterministic: a fixed seed), while
  // the arena is above the lower bound: move one place elsewhere in the
  // order, keep the move when the arena is no larger. Bounded work: about
  // 4e7 overlap tests, so a step of a thousand buffers searches a little.
  if (!live_places.empty() && total > most_live) {
    const size_t n = best_order.size();
    const int64_t iters = std::min<int64_t>(3000, int64_t(4e7 / (double(n) * double(n) + 1.0)));
    std::mt19937_64 rng(0x6b696c6e);
    std::vector<size_t> cand;
    for (int64_t it = 0; it < iters && total > most_live && n > 1; ++it) {
      cand = best_order;
      const size_t from = size_t(rng() % n), to = size_t(rng() % n);
      const size_t moved = cand[from];
      cand.erase(cand.begin() + int64_t(from));
      cand.insert(cand.begin() + int64_t(to), moved);
      const size_t t = place_all(cand, best_fit_used, trial);
      if (t <= total) {
        if (t < total) offset = trial;
        total = t;
        best_order.swap(cand);
      }
    }
    place_all(best_order, best_fit_used, offset);  // the kept order's offsets
  }
  if (live_places.empty()) total = 0;
  for (size_t p : live_places) places[p].offset = offset[p];
  // KILN_COMPILE_PLAN=1: what the arena holds at its fullest launch, largest first.
  if (const char* v = std::getenv("KILN_COMPILE_PLAN"); v && std::string(v) == "1" && !lives.empty()) {
    std::fprintf(stderr, "memory plan: arena %zu bytes, %zu bytes alive at launch %zu (%s); alive there:\n", total,
                 most_live, peak_at, launches[peak_at].op);
    std::vector<size_t> alive;
    for (size_t p : live_places)
      if (places[p].first <= peak_at && peak_at <= places[p].last) alive.push_back(p);
    std::stable_sort(alive.begin(), alive.end(),
                     [&](size_t a, size_t c) { return places[a].bytes > places[c].bytes; });
    for (size_t p : alive) {
      const Place& pl = places[p];
      std::string ops;
      for (size_t m : pl.members)
        ops += fmt::format("{}{} [{}..{}]", ops.empty() ? "" : " -> ", launches[lives[m].first].op, lives[m].first,
                           lives[m].last);
      std::fprintf(stderr, "  %10zu bytes  launches %zu..%zu  made by %s\n", pl.bytes, pl.first, pl.last,
                   ops.c_str());
    }
  }
  if (const char* v = std::getenv("KILN_COMPILE_PLAN"); v && std::string(v) == "2")
    for (size_t p : live_places)
      if (places[p].bytes >= 65536)
        std::fprintf(stderr, "  place %zu bytes [%zu..%zu] at %zu (%s)\n", places[p].bytes, places[p].first,
                     places[p].last, places[p].offset, launches[places[p].first].op);
  int64_t kept_bytes = 0;
  std::vector<std::pair<size_t, std::string>> kept_sizes;
  for (const auto& st : rec.storages())
    if (!index.count(st.get())) {
      kept_bytes += int64_t(st->nbytes());
      auto it = b.impls.find(st.get());
      std::string what = "?";
      if (it != b.impls.end() && !it->second.empty()) {
        const Tensor t(it->second.front());
        what = fmt::format("{} {}", name(t.dtype()), to_string(t.shape()));
        for (const replay::Launch& l : launches)
          if (std::find(l.touched.begin(), l.touched.end(), st.get()) != l.touched.end()) {
            what += fmt::format(" by {}", l.op);
            break;
          }
      }
      kept_sizes.emplace_back(st->nbytes(), what);
    }
  if (const char* v = std::getenv("KILN_COMPILE_PLAN"); v && std::string(v) == "1") {
    std::sort(kept_sizes.rbegin(), kept_sizes.rend());
    std::string sizes;
    for (size_t k = 0; k < kept_sizes.size() && k < 12; ++k)
      sizes += fmt::format(" {} ({}),", kept_sizes[k].first, kept_sizes[k].second);
    std::fprintf(stderr, "  kept outside the arena: %zu buffers, %lld bytes; largest:%s\n", kept_sizes.size(),
                 (long long)kept_bytes, sizes.c_str());
  }
  held_bytes = kept_bytes + int64_t(total);
  if (lives.empty())
    return {"MemoryPlanning", PassStatus::Analyzed,
            fmt::format("no temporary buffer to place; {} buffers fixed at record time ({} bytes), no allocation "
                        "in a replay", rec.storages().size(), kept_bytes)};
  auto arena = std::make_shared<Storage>(total, lives.front().st->device());
  char* base = static_cast<char*>(arena->data());
  for (const Life& l : lives) {
    auto* holder = new std::shared_ptr<Storage>(arena);
    auto moved = std::make_shared<Storage>(
        base + places[l.group].offset, l.st->nbytes(), l.st->device(),
        [](void*, void* ctx) { delete static_cast<std::shared_ptr<Storage>*>(ctx); }, holder);
    for (const auto& impl : b.impls[l.st]) impl->storage = moved;
    rec.replace_storage(l.st, moved);  // frees the recording's own buffer
  }
  return {"MemoryPlanning", PassStatus::Applied,
          fmt::format("{} temporary buffers ({} bytes apart) placed by lifetime in one {}-byte arena (at most "
                      "{} bytes alive at once); {} elementwise outputs written over an input read there for the "
                      "last time ({} bytes shared); offsets computed once; {} buffers stay where they are ({} "
                      "bytes: parameters, optimizer state, inputs, outputs, gradients); no allocation in a replay",
                      lives.size(), separate, total, most_live, in_place, in_place_bytes,
                      rec.storages().size() - lives.size(), kept_bytes)};
}

// The passes, in the order, over a finished recording.
CaptureEvidence run_passes(replay::Recorder& rec, std::vector<replay::FusionNote>& notes, bool fusion) {
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
  NoteIndex note_of(launches.size(), -1);
  for (size_t k = 0; k < notes.size(); ++k)
    if (notes[k].launch < note_of.size()) note_of[notes[k].launch] = int(k);
  ev.passes.push_back(remove_dead_launches(rec, note_of));
  if (fusion) {
    const std::string chains = fuse_elementwise_chains(rec, notes, note_of);
    ev.passes.push_back(fuse_linear_activations(rec, notes, note_of, chains));
  }
  else ev.passes.push_back({"Fusion", PassStatus::NotRun, "turned off (CompileOptions::fusion)"});
  int64_t held_bytes = 0;
  ev.passes.push_back(plan_memory(rec, held_bytes, notes, note_of));
  ev.passes.push_back({"KernelSelection", PassStatus::Inherited,
                       "primitives chosen per shape at the first launch by the backend's caches (oneDNN "
                       "primitives, kiln's small-GEMM path, the ISA copy); a replay re-enters them"});
  ev.launches = ev.host_effects = 0;
  for (const replay::Launch& l : rec.launches()) (l.host_effect ? ev.host_effects : ev.launches)++;
  ev.buffers = int64_t(rec.storages().size());
  ev.buffer_bytes = held_bytes;
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

  Signature scratch;  // the call's signature, built in place (no allocation once warm)

  Signature signature(const std::vector<Tensor>& inputs) const {
    Signature s;
    signature_into(s, inputs);
    return s;
  }

  void signature_into(Signature& s, const std::vector<Tensor>& inputs) const {
    s.key.clear();
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
    (void)replay::take_fusion_notes(nullptr);  // a recording that threw may have left some
    {
      replay::RecordingScope scope(*rec);
      outs = fn(e.inputs);  // an exception leaves no recording behind
    }
    std::vector<replay::FusionNote> notes = replay::take_fusion_notes(rec.get());
    ++recordings;
    // Outputs detached first: the step's autograd graph (and what it saves)
    // goes, so that the passes see which buffers only the recording holds.
    for (Tensor& t : outs)
      if (t.defined()) t = t.detach();
    if (!rec->rejected()) release_graph(*rec);
    evidence = run_passes(*rec, notes, opts.fusion);
    notes.clear();
    if (evidence.replayable) kiln::empty_cache();  // the recording's own buffers, now replaced by the arena
    if (opts.print_evidence) std::fputs(evidence.str().c_str(), stderr);
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
  s.signature_into(s.scratch, inputs);
  const Signature& sig = s.scratch;
  auto it = std::find_if(s.entries.begin(), s.entries.end(), [&](const Impl::Entry& e) { return e.sig == sig; });
  if (it == s.entries.end()) return s.record(sig, inputs);
  if (!it->rec) {
    ++s.eager;
    s.last = Mode::Eager;
    return s.fn(inputs);
  }
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < inputs.size(); ++i) {
      // The recorded buffer is contiguous with the input's shape and dtype
      // (the signature): a contiguous input is one memcpy, no op dispatch.
      const Tensor& src = inputs[i];
      Tensor& dst = it->inputs[i];
      if (src.is_contiguous() && src.device() == dst.device()) {
        if (src.data_ptr() != dst.data_ptr()) std::memcpy(dst.data_ptr(), src.data_ptr(), size_t(dst.nbytes()));
      } else {
        copy_(dst, src);
      }
    }
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
  // The closure holds the loss's value only: the loss itself would keep the
  // step's autograd graph (and what its nodes hold) alive for the recording's life.
  auto apply = [loss = loss.detach(), o, applied] {
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
