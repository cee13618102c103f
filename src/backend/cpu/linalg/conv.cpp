// Convolution on oneDNN (f32, bf16): forward, backward-data and
// backward-weights primitives, each cached per thread in an LRU keyed by the
// whole geometry, with the layout oneDNN prefers (format_tag::any) and cached
// reorders between it and kiln's plain NCHW / OIHW tensors. f64 (and
// anything oneDNN refuses) runs the plain loops in conv_ref.cpp.
#include "src/backend/cpu/linalg/conv.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/bf16_compute.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/dnnl_common.h"

namespace kiln::backend::cpu {

namespace {

using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;

using dnnl_common::engine;
using dnnl_common::stream;

enum class Kind : int64_t { forward, backward_data, backward_weights };

struct Key {
  std::array<int64_t, 27> v{};
  bool operator==(const Key& o) const { return v == o.v; }
};

struct KeyHash {
  size_t operator()(const Key& k) const { return dnnl_common::hash_words(k.v.data(), k.v.size()); }
};

Key make_key(Kind kind, DType dt, bool bias, int threads, const ConvGeom& g, bool wino) {
  return {{int64_t(kind), int64_t(dt), int64_t(bias), int64_t(threads), g.B, g.C, g.O, g.groups, g.H, g.W, g.OH, g.OW, g.KH, g.KW,
           g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.pb, g.pr, int64_t(wino), int64_t(g.large_blocked),
           int64_t(g.small_blocked), int64_t(g.relu), 0}};
}

// One tensor argument of a primitive: kiln's plain memory (its data handle
// set per call) and, when oneDNN prefers another layout, memory in that
// layout with the reorder between the two. Reordered inputs live in the
// thread's ReorderCache (NOTE [Reordered inputs]); outputs own their buffer.
struct Arg {
  int id = 0;                 // DNNL_ARG_*
  dnnl::memory user, prim;    // prim == user when the layouts agree
  dnnl::reorder reorder;      // user -> prim (inputs) or prim -> user (outputs)
  bool needs_reorder = false;
};

struct Entry {
  dnnl::primitive prim;
  std::vector<Arg> inputs, outputs;
  std::vector<dnnl_exec_arg_t> args;  // the C API's list, built once
  dnnl::memory scratch;               // points into the thread's scratch buffer at each call
  size_t scratch_bytes = 0;
  std::string impl;
  bool unusable = false;  // oneDNN rejected the geometry or offers only its reference code
};

// Entries hold activation-sized buffers: keep the cache modest.
using Cache = dnnl_common::LruCache<Key, Entry, KeyHash>;
constexpr size_t kCacheCapacity = 32;

// NOTE [Conv scratchpad]: oneDNN's kernels need scratch memory (the
// backward-weights reduction buffers are activation-sized). Left to oneDNN,
// this build allocates it at every call, so each step page-faults fresh
// memory; instead each thread keeps one buffer, grown to the largest need.
struct ScratchBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  ~ScratchBuffer() { std::free(data); }
  void* get(size_t need) {
    if (need > bytes) {
      std::free(data);
      bytes = (need + 4095) / 4096 * 4096;
      data = std::aligned_alloc(4096, bytes);
      KILN_CHECK(data != nullptr, "conv", "out of memory for {} bytes of oneDNN scratch", bytes);
    }
    return data;
  }
};

// NOTE [Reordered inputs]: an input reordered into oneDNN's layout is kept,
// identified by (storage, offset, version counter, layout), in a small
// per-thread LRU. In a training step the forward pass reorders x and the
// backward-weights pass finds it; backward-data reorders the output gradient
// and backward-weights finds it; a weight that did not change since the last
// call (inference, or the same weight used twice) is not reordered again. Any
// in-place write bumps the version and so invalidates the copy; freed
// storage expires its weak_ptr.
class ReorderCache {
 public:
  static constexpr size_t kSlots = 8;

  // The buffer holding t in layout `want`, and whether it is already filled.
  std::pair<void*, bool> find_or_claim(const Tensor& t, const md& want) {
    Slot* hit = nullptr;
    Slot* victim = nullptr;
    for (Slot& s : slots_) {
      const bool same = !s.storage.expired() && s.storage.lock() == t.storage() && s.offset == t.storage_offset() &&
                        s.desc == want;
      if (same && s.version == t.storage()->version()) {
        hit = &s;
        break;
      }
      if (same) victim = &s;  // a stale copy of the same tensor: overwrite it
    }
    if (hit) {
      hit->last_use = ++clock_;
      return {hit->buf.get(), true};
    }
    if (!victim) {
      if (slots_.size() < kSlots) {
        victim = &slots_.emplace_back();
      } else {
        victim = &slots_[0];
        for (Slot& s : slots_)
          if (s.last_use < victim->last_use) victim = &s;
      }
    }
    const size_t need = want.get_size();
    if (victim->cap < need) {
      victim->buf.reset(static_cast<char*>(std::aligned_alloc(64, (need + 63) / 64 * 64)));
      KILN_CHECK(victim->buf != nullptr, "conv", "out of memory for a {}-byte reordered copy", need);
      victim->cap = need;
    }
    victim->storage = t.storage();
    victim->offset = t.storage_offset();
    victim->version = t.storage()->version();
    victim->desc = want;
    victim->last_use = ++clock_;
    return {victim->buf.get(), false};
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  struct Slot {
    std::weak_ptr<Storage> storage;
    int64_t offset = -1;
    uint64_t version = 0;
    md desc;
    std::unique_ptr<char, Free> buf;
    size_t cap = 0;
    uint64_t last_use = 0;
  };
  std::vector<Slot> slots_;  // reserved: pointers into it stay valid
  uint64_t clock_ = 0;

 public:
  ReorderCache() { slots_.reserve(kSlots); }
};

struct ThreadState {
  Cache cache{kCacheCapacity};
  ScratchBuffer scratch;
  ReorderCache reordered;
  std::string last_impl = "none";
  int64_t weight_reorders = 0, reorders_skipped = 0;  // see ConvCacheStats
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

dnnl::memory::data_type dnnl_type(DType t) {
  return t == kBF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// kiln's descriptors for the three tensors of a geometry: NCHW, or nChw16c
// for a blocked activation (NOTE [Blocked activations] in conv.h).
md large_md(const ConvGeom& g, DType dt) {
  return md({g.B, g.C, g.H, g.W}, dnnl_type(dt), g.large_blocked ? tag::nChw16c : tag::nchw);
}
md small_md(const ConvGeom& g, DType dt) {
  return md({g.B, g.O, g.OH, g.OW}, dnnl_type(dt), g.small_blocked ? tag::nChw16c : tag::nchw);
}
md weight_md(const ConvGeom& g, DType dt) {
  // Grouped weights [O, C/g, KH, KW] are oneDNN's [g, O/g, C/g, KH, KW] in the same memory.
  if (g.groups == 1) return md({g.O, g.C, g.KH, g.KW}, dnnl_type(dt), tag::oihw);
  return md({g.groups, g.O / g.groups, g.C / g.groups, g.KH, g.KW}, dnnl_type(dt), tag::goihw);
}
// NOTE [Conv layouts]: with format_tag::any, oneDNN picks channel-blocked
// layouts (nChw16c) and kiln reorders NCHW tensors in and out. That pays
// when channels fill the 16-wide blocks (measured on [64, 32, 14, 14] -> 64
// channels: blocked is about 30% faster than plain, reorders included); with
// few channels (a first layer, C = 1) the blocks are mostly padding and the
// plain NCHW kernels are twice as fast. So: plain when either side of a
// group has fewer than 16 channels.
bool plain_layouts(const ConvGeom& g) { return g.C / g.groups < 16 || g.O / g.groups < 16; }
md any_like(const ConvGeom& g, const md& m) { return plain_layouts(g) ? m : md(m.dims(), m.data_type(), tag::any); }
// A first layer (few input channels, C/g < 16, O/g >= 16, no groups) is the
// exception for backward-weights: plain, oneDNN runs it as im2col + gemm,
// 1.7 ms on [64, 1, 28, 28] -> 32 channels (1 thread), while its JIT kernel
// with the large side plain and the small side (and weights) blocked takes
// 0.23 ms plus 0.38 ms to reorder the output gradient. Forward stays plain
// there: gemm (0.6 ms) beats JIT (0.4 ms) plus reordering its output back.
// Should oneDNN offer only its reference code that way, the plain layouts are
// tried (make_entry's first_layer_blocked = false).
bool first_layer(const ConvGeom& g) { return g.groups == 1 && g.C < 16 && g.O >= 16; }
md any_all(const md& m) { return md(m.dims(), m.data_type(), tag::any); }
// What the primitive is asked for: a blocked activation exactly as kiln holds
// it; with either activation blocked the weights' layout is oneDNN's choice
// (its kernels for nChw16c want blocked weights, even with few channels).
bool any_blocked(const ConvGeom& g) { return g.large_blocked || g.small_blocked; }
md want_large(const ConvGeom& g, const md& m) { return g.large_blocked ? m : any_like(g, m); }
md want_small(const ConvGeom& g, const md& m) { return g.small_blocked ? m : any_like(g, m); }
md want_weights(const ConvGeom& g, const md& m) { return any_blocked(g) ? any_all(m) : any_like(g, m); }

// NOTE [Winograd]: 3x3 stride-1 convolutions run oneDNN's Winograd kernels,
// F(4x4, 3x3) (jit_wino_4x3, AVX-512 only), where it offers them: f32, no
// groups or dilation, channel counts that are multiples of 16 (its blocked
// layout). Each 6x6 input tile gives 4x4 outputs with 36 multiplies per
// channel pair instead of 144, so on the VQ-VAE's [128, 64, 7, 7] -> 64 conv
// (1 thread, Zen 4) forward 3.3 -> 2.2 ms, backward-data 3.3 -> 2.1 ms,
// backward-weights 4.1 -> 2.9 ms, and on cnn_b64's [64, 32, 14, 14] -> 64
// forward 5.1 -> 2.4 ms. The price is rounding: the tile transforms add and
// subtract, so outputs differ from the direct kernel's by a few f32 ulps of
// the output's scale (max 6e-6 absolute on outputs of rms 0.9, against 1e-6
// direct; backward-weights as accurate as direct), the same trade PyTorch's
// cuDNN makes. set_conv_winograd(false) (or KILN_CONV_WINOGRAD=0) keeps every
// convolution direct. Where oneDNN has no Winograd kernel (AVX2) or only its
// reference code, the direct primitive is made instead (run_dnnl).
std::atomic<int>& winograd_flag() {
  static std::atomic<int> flag{[] {
    const char* v = std::getenv("KILN_CONV_WINOGRAD");
    return v && std::strcmp(v, "0") == 0 ? 0 : 1;
  }()};
  return flag;
}
bool winograd_geometry(const ConvGeom& g, DType dt) {
  return dt == kF32 && g.groups == 1 && g.KH == 3 && g.KW == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 &&
         g.dw == 1 && g.C % 16 == 0 && g.O % 16 == 0 && g.OH > 0 && g.OW > 0;
}

Arg make_arg(int id, const md& user_md, const md& prim_md, bool is_input) {
  Arg a;
  a.id = id;
  a.user = dnnl::memory(user_md, engine(), nullptr);
  if (user_md == prim_md) {
    a.prim = a.user;
  } else {
    // Inputs point into the ReorderCache at each call; outputs own a buffer.
    a.prim = is_input ? dnnl::memory(prim_md, engine(), nullptr) : dnnl::memory(prim_md, engine());
    a.needs_reorder = true;
    a.reorder = is_input ? dnnl::reorder(a.user, a.prim) : dnnl::reorder(a.prim, a.user);
  }
  return a;
}

void finish(Entry& e, const std::string& impl, const md& scratch) {
  e.impl = impl;
  e.scratch_bytes = scratch.get_size();
  e.scratch = dnnl::memory(scratch, engine(), nullptr);
  e.unusable = impl.rfind("ref", 0) == 0;
  for (const Arg& a : e.inputs) e.args.push_back({a.id, a.prim.get()});
  for (const Arg& a : e.outputs) e.args.push_back({a.id, a.prim.get()});
  e.args.push_back({DNNL_ARG_SCRATCHPAD, e.scratch.get()});
}

// The caller passes scratch memory (NOTE [Conv scratchpad]). relu: an
// eltwise ReLU post-op on the output (after the bias).
dnnl::primitive_attr scratch_attr(bool relu = false) {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    a.set_post_ops(po);
  }
  return a;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvGeom& g, DType dt, bool bias, dnnl::algorithm alg,
                                                     bool relu = false) {
  const dnnl::memory::dims strides{g.sh, g.sw}, dil{g.dh - 1, g.dw - 1}, pl{g.pt, g.pl}, pr{g.pb, g.pr};
  md b_md = bias ? md({g.O}, dnnl_type(dt), tag::x) : md();
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, alg,
                                    want_large(g, large_md(g, dt)), want_weights(g, weight_md(g, dt)), b_md,
                                    want_small(g, small_md(g, dt)), strides, dil, pl, pr);
  return dnnl::convolution_forward::primitive_desc(d, scratch_attr(relu), engine());
}

Entry make_entry(Kind kind, const ConvGeom& g, DType dt, bool bias, bool first_layer_blocked = true,
                 dnnl::algorithm alg = dnnl::algorithm::convolution_direct) {
  Entry e;
  const dnnl::memory::dims strides{g.sh, g.sw}, dil{g.dh - 1, g.dw - 1}, pl{g.pt, g.pl}, pr{g.pb, g.pr};
  const md L = large_md(g, dt), S = small_md(g, dt), Wt = weight_md(g, dt);
  try {
    if (kind == Kind::forward) {
      auto pd = forward_pd(g, dt, bias, alg, g.relu);
      e.prim = dnnl::convolution_forward(pd);
      e.inputs.push_back(make_arg(DNNL_ARG_SRC, L, pd.src_desc(), true));
      e.inputs.push_back(make_arg(DNNL_ARG_WEIGHTS, Wt, pd.weights_desc(), true));
      if (bias) e.inputs.push_back(make_arg(DNNL_ARG_BIAS, pd.bias_desc(), pd.bias_desc(), true));
      e.outputs.push_back(make_arg(DNNL_ARG_DST, S, pd.dst_desc(), false));
      finish(e, pd.impl_info_str(), pd.scratchpad_desc());
    } else if (kind == Kind::backward_data) {
      auto hint = forward_pd(g, dt, false, alg);
      dnnl::convolution_backward_data::desc d(alg, want_large(g, L), want_weights(g, Wt), want_small(g, S), strides,
                                              dil, pl, pr);
      dnnl::convolution_backward_data::primitive_desc pd(d, scratch_attr(), engine(), hint);
      e.prim = dnnl::convolution_backward_data(pd);
      e.inputs.push_back(make_arg(DNNL_ARG_DIFF_DST, S, pd.diff_dst_desc(), true));
      e.inputs.push_back(make_arg(DNNL_ARG_WEIGHTS, Wt, pd.weights_desc(), true));
      e.outputs.push_back(make_arg(DNNL_ARG_DIFF_SRC, L, pd.diff_src_desc(), false));
      finish(e, pd.impl_info_str(), pd.scratchpad_desc());
    } else {
      auto hint = forward_pd(g, dt, bias, alg);
      md gb_md = bias ? md({g.O}, dnnl_type(dt), tag::x) : md();
      const bool first = first_layer_blocked && first_layer(g);
      const md Wd = first ? any_all(Wt) : want_weights(g, Wt);
      const md Sd = g.small_blocked ? S : first ? any_all(S) : any_like(g, S);
      dnnl::convolution_backward_weights::desc d(alg, want_large(g, L), Wd, gb_md,
                                                 Sd, strides, dil, pl, pr);
      dnnl::convolution_backward_weights::primitive_desc pd(d, scratch_attr(), engine(), hint);
      e.prim = dnnl::convolution_backward_weights(pd);
      e.inputs.push_back(make_arg(DNNL_ARG_SRC, L, pd.src_desc(), true));
      e.inputs.push_back(make_arg(DNNL_ARG_DIFF_DST, S, pd.diff_dst_desc(), true));
      e.outputs.push_back(make_arg(DNNL_ARG_DIFF_WEIGHTS, Wt, pd.diff_weights_desc(), false));
      if (bias) e.outputs.push_back(make_arg(DNNL_ARG_DIFF_BIAS, gb_md, pd.diff_bias_desc(), false));
      finish(e, pd.impl_info_str(), pd.scratchpad_desc());
    }
  } catch (const dnnl::error&) {
    // E.g. a bottom padding below what this oneDNN accepts: the plain loops run instead.
    e = Entry();
    e.impl = "unsupported";
    e.unusable = true;
  }
  return e;
}

// Runs `kind` on oneDNN. Tensors come in the entry's argument order (inputs,
// then outputs), inputs contiguous, outputs contiguous. False when oneDNN
// does not take this geometry (nothing was written).
bool run_dnnl(Kind kind, const ConvGeom& g, DType dt, bool bias, std::initializer_list<const Tensor*> inputs,
              std::initializer_list<const Tensor*> outputs) {
  // oneDNN's kernels split work for the OpenMP count seen when the
  // primitive is created: set it first, and key the cache on it.
  const int nt = effective_num_threads();
  dnnl_common::OmpThreads threads(nt);
  ThreadState& ts = state();
  const bool wino = winograd_flag().load(std::memory_order_relaxed) != 0 && winograd_geometry(g, dt);
  const Key key = make_key(kind, dt, bias, nt, g, wino);
  Entry* e = ts.cache.find(key);
  if (!e) {
    Entry made;
    if (wino) {
      made = make_entry(kind, g, dt, bias, true, dnnl::algorithm::convolution_winograd);
      if (made.impl.rfind("jit_wino", 0) != 0) made = Entry();  // no Winograd kernel here: direct below
    }
    if (made.impl.empty()) made = make_entry(kind, g, dt, bias);
    if (made.unusable && kind == Kind::backward_weights && first_layer(g))
      made = make_entry(kind, g, dt, bias, false);
    e = ts.cache.insert(key, std::move(made));
  }
  if (e->unusable) return false;
  ts.last_impl = e->impl;
  dnnl::stream& s = stream();
  size_t i = 0;
  for (const Tensor* t : inputs) {
    Arg& a = e->inputs[i++];
    a.user.set_data_handle(t->data_ptr());
    if (!a.needs_reorder) continue;
    auto [buf, filled] = ts.reordered.find_or_claim(*t, a.prim.get_desc());
    a.prim.set_data_handle(buf);
    if (filled) {
      ++ts.reorders_skipped;
      continue;
    }
    a.reorder.execute(s, a.user, a.prim);
    if (a.id == DNNL_ARG_WEIGHTS) ++ts.weight_reorders;
  }
  i = 0;
  for (const Tensor* t : outputs) e->outputs[i++].user.set_data_handle(t->data_ptr());
  if (e->scratch_bytes > 0) e->scratch.set_data_handle(ts.scratch.get(e->scratch_bytes));
  dnnl_status_t st = dnnl_primitive_execute(e->prim.get(), s.get(), int(e->args.size()), e->args.data());
  KILN_CHECK(st == dnnl_success, "conv", "oneDNN failed to run {} (status {})", e->impl, int(st));
  for (Arg& a : e->outputs)
    if (a.needs_reorder) a.reorder.execute(s, a.prim, a.user);
  return true;
}

bool on_dnnl(DType dt) { return dt == kF32 || dt == kBF16; }

// A [B, C, H, W] tensor (any strides) viewed in a blocked tensor's element
// order: the same element at [b, c / 16, h, w, c % 16] in both.
Tensor plain_as_blocked(const Tensor& plain) {
  const Shape& n = plain.shape();
  const Strides& st = plain.strides();
  return Tensor::make_view(plain.storage(), {n[0], n[1] / 16, n[2], n[3], 16}, {st[0], 16 * st[1], st[2], st[3], st[1]},
                           plain.storage_offset(), plain.dtype());
}

Tensor unblocked(const Tensor& t, int64_t B, int64_t C, int64_t H, int64_t W) {
  Tensor p = Tensor::empty({B, C, H, W}, t.dtype(), t.device());
  unblock_channels(t, p);
  return p;
}

// ReLU in place over a contiguous tensor (paths without the fused post-op).
void relu_inplace(const Tensor& t) {
  dispatch_only<bfloat16, float, double>(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.data_ptr());
    parallel_for(0, t.numel(), 65536, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        if (!(float(p[i]) > 0.f)) p[i] = T(0.f);  // NaN stays NaN below
    });
  });
}

// backward-data's epilogue: + bias[C] and/or ReLU over large (oneDNN's
// backward-data has neither), NCHW or blocked, one pass.
void add_bias_relu(const ConvGeom& g, const Tensor* bias, bool relu, const Tensor& large) {
  if (!bias && !relu) return;
  const DType dt = large.dtype();
  Tensor b = bias ? bias->contiguous() : Tensor();
  dispatch_only<bfloat16, float, double>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* bp = bias ? static_cast<const T*>(b.data_ptr()) : nullptr;
    T* x = static_cast<T*>(large.data_ptr());
    // One block: a (b, c) plane (NCHW, one channel) or a (b, c/16) block of
    // H*W*16 values (nChw16c, channel = 16 * block + lane).
    const bool blk = g.large_blocked;
    const int64_t plane = blk ? g.H * g.W * 16 : g.H * g.W, nblocks = blk ? g.B * (g.C / 16) : g.B * g.C;
    const int64_t per_b = blk ? g.C / 16 : g.C;
    parallel_for(0, nblocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(plane, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t bc = lo; bc < hi; ++bc) {
        T* p = x + bc * plane;
        const int64_t c0 = bc % per_b;
        if (!blk) {
          const A v = bp ? A(bp[c0]) : A(0);
          if (relu) {
#pragma omp simd
            for (int64_t k = 0; k < plane; ++k) {
              const A y = A(p[k]) + v;
              p[k] = T(y > A(0) ? y : A(0));  // NaN -> 0 here as in oneDNN's post-op
            }
          } else {
#pragma omp simd
            for (int64_t k = 0; k < plane; ++k) p[k] = T(A(p[k]) + v);
          }
        } else {
          A v[16];
          for (int l = 0; l < 16; ++l) v[l] = bp ? A(bp[c0 * 16 + l]) : A(0);
          for (int64_t k = 0; k < plane; k += 16) {
#pragma omp simd
            for (int l = 0; l < 16; ++l) {
              const A y = A(p[k + l]) + v[l];
              p[k + l] = relu ? T(y > A(0) ? y : A(0)) : T(y);
            }
          }
        }
      }
    });
  });
}

}  // namespace

namespace {
// f32 through oneDNN's reorder (a 16 x H*W transpose per block; its JIT
// kernel is several times faster than the generic strided copy), which its
// primitive cache keeps; other dtypes through copy().
bool reorder_f32(const Tensor& from, bool from_blocked, const Tensor& to) {
  if (from.dtype() != kF32 || to.dtype() != kF32) return false;
  const Tensor& pt = from_blocked ? to : from;  // the plain [B, C, H, W]
  const Shape& p = pt.shape();
  // NCHW contiguous, or NHWC: a [B, H, W, C] contiguous tensor permuted to [B, C, H, W].
  const bool nhwc = pt.strides() == Strides{p[1] * p[2] * p[3], 1, p[3] * p[1], p[1]};
  if (!nhwc && !pt.is_contiguous()) return false;
  const md plain({p[0], p[1], p[2], p[3]}, dnnl::memory::data_type::f32, nhwc ? tag::nhwc : tag::nchw);
  const md blk({p[0], p[1], p[2], p[3]}, dnnl::memory::data_type::f32, tag::nChw16c);
  if (p[0] * p[1] * p[2] * p[3] == 0) return true;
  dnnl::memory src(from_blocked ? blk : plain, engine(), from.data_ptr());
  dnnl::memory dst(from_blocked ? plain : blk, engine(), to.data_ptr());
  dnnl_common::OmpThreads threads(effective_num_threads());
  dnnl::reorder(src, dst).execute(stream(), src, dst);
  return true;
}
}  // namespace

void unblock_channels(const Tensor& blocked_in, const Tensor& plain) {
  const Tensor blocked = blocked_in.contiguous();
  if (!reorder_f32(blocked, true, plain)) copy(blocked, plain_as_blocked(plain));
}

void block_channels(const Tensor& plain, const Tensor& blocked) {
  if (!reorder_f32(plain, false, blocked)) copy(plain_as_blocked(plain), blocked);
}

void conv_forward(const ConvGeom& g, const Tensor& large_in, const Tensor& w_in, const Tensor* bias,
                  const Tensor& small) {
  if (small.numel() == 0) return;
  const DType dt = small.dtype();
  if (any_blocked(g)) {
    if (dt == kF32) {
      Tensor large = large_in.contiguous(), w = w_in.contiguous();
      Tensor b = bias ? bias->contiguous() : Tensor();
      bool ok = bias ? run_dnnl(Kind::forward, g, dt, true, {&large, &w, &b}, {&small})
                     : run_dnnl(Kind::forward, g, dt, false, {&large, &w}, {&small});
      if (ok) return;
    }
    // Plain path on converted copies (NOTE [Blocked activations]).
    ConvGeom p = g;
    p.large_blocked = p.small_blocked = false;
    Tensor large = g.large_blocked ? unblocked(large_in, g.B, g.C, g.H, g.W) : large_in;
    Tensor s = g.small_blocked ? Tensor::empty({g.B, g.O, g.OH, g.OW}, dt, small.device()) : small;
    conv_forward(p, large, w_in, bias, s);
    if (g.small_blocked) block_channels(s, small);
    return;
  }
  if (widen_bf16(dt)) {
    Tensor s32 = Tensor::empty(small.shape(), kF32, small.device()), b32 = bias ? widened(*bias) : Tensor();
    conv_forward(g, widened(large_in), widened(w_in), bias ? &b32 : nullptr, s32);
    copy(s32, small);
    return;
  }
  if (on_dnnl(dt)) {
    Tensor large = large_in.contiguous(), w = w_in.contiguous();
    Tensor b = bias ? bias->contiguous() : Tensor();
    bool ok = bias ? run_dnnl(Kind::forward, g, dt, true, {&large, &w, &b}, {&small})
                   : run_dnnl(Kind::forward, g, dt, false, {&large, &w}, {&small});
    if (ok) return;
  }
  state().last_impl = "ref";
  ref::conv_forward(g, large_in, w_in, bias, small);
  if (g.relu) relu_inplace(small);
}

void conv_backward_data(const ConvGeom& g, const Tensor& small_in, const Tensor& w_in, const Tensor* bias,
                        const Tensor& large) {
  if (large.numel() == 0) return;
  const DType dt = large.dtype();
  if (any_blocked(g)) {
    if (dt == kF32) {
      Tensor small = small_in.contiguous(), w = w_in.contiguous();
      if (run_dnnl(Kind::backward_data, g, dt, false, {&small, &w}, {&large})) {
        add_bias_relu(g, bias, g.relu, large);
        return;
      }
    }
    ConvGeom p = g;
    p.large_blocked = p.small_blocked = false;
    Tensor small = g.small_blocked ? unblocked(small_in, g.B, g.O, g.OH, g.OW) : small_in;
    Tensor l = g.large_blocked ? Tensor::empty({g.B, g.C, g.H, g.W}, dt, large.device()) : large;
    conv_backward_data(p, small, w_in, bias, l);
    if (g.large_blocked) block_channels(l, large);
    return;
  }
  if (widen_bf16(dt)) {
    Tensor l32 = Tensor::empty(large.shape(), kF32, large.device()), b32 = bias ? widened(*bias) : Tensor();
    conv_backward_data(g, widened(small_in), widened(w_in), bias ? &b32 : nullptr, l32);
    copy(l32, large);
    return;
  }
  if (on_dnnl(dt)) {
    Tensor small = small_in.contiguous(), w = w_in.contiguous();
    if (run_dnnl(Kind::backward_data, g, dt, false, {&small, &w}, {&large})) {
      add_bias_relu(g, bias, g.relu, large);
      return;
    }
  }
  state().last_impl = "ref";
  ref::conv_backward_data(g, small_in, w_in, bias, large);
  if (g.relu) relu_inplace(large);
}

void conv_backward_weights(const ConvGeom& g_in, const Tensor& large_in, const Tensor& small_in, const Tensor& gw,
                           const Tensor* gb) {
  if (gw.numel() == 0) return;
  ConvGeom g = g_in;
  g.relu = false;  // no output to activate
  const DType dt = gw.dtype();
  if (any_blocked(g)) {
    if (dt == kF32 && g.B * g.OH * g.OW > 0) {
      Tensor large = large_in.contiguous(), small = small_in.contiguous();
      bool ok = gb ? run_dnnl(Kind::backward_weights, g, dt, true, {&large, &small}, {&gw, gb})
                   : run_dnnl(Kind::backward_weights, g, dt, false, {&large, &small}, {&gw});
      if (ok) return;
    }
    ConvGeom p = g;
    p.large_blocked = p.small_blocked = false;
    Tensor large = g.large_blocked ? unblocked(large_in, g.B, g.C, g.H, g.W) : large_in;
    Tensor small = g.small_blocked ? unblocked(small_in, g.B, g.O, g.OH, g.OW) : small_in;
    conv_backward_weights(p, large, small, gw, gb);
    return;
  }
  if (widen_bf16(dt)) {
    Tensor gw32 = Tensor::empty(gw.shape(), kF32, gw.device());
    Tensor gb32 = gb ? Tensor::empty(gb->shape(), kF32, gb->device()) : Tensor();
    conv_backward_weights(g, widened(large_in), widened(small_in), gw32, gb ? &gb32 : nullptr);
    copy(gw32, gw);
    if (gb) copy(gb32, *gb);
    return;
  }
  if (on_dnnl(dt) && g.B * g.OH * g.OW > 0) {
    Tensor large = large_in.contiguous(), small = small_in.contiguous();
    bool ok = gb ? run_dnnl(Kind::backward_weights, g, dt, true, {&large, &small}, {&gw, gb})
                 : run_dnnl(Kind::backward_weights, g, dt, false, {&large, &small}, {&gw});
    if (ok) return;
  }
  state().last_impl = "ref";
  ref::conv_backward_weights(g, large_in, small_in, gw, gb);
}

const std::string& last_conv_impl() { return state().last_impl; }

bool channel_blocked_native() {
  // A small f32 3x3 forward asked for nChw16c on both sides: made by a JIT
  // kernel (AVX-512), or only by oneDNN's reference code (AVX2 kernels block
  // by 8), in which case the blocked ops would run on converted copies.
  static const bool native = [] {
    ConvGeom g{.B = 1, .C = 16, .O = 16, .H = 4, .W = 4, .OH = 4, .OW = 4, .KH = 3, .KW = 3, .pt = 1, .pl = 1,
               .pb = 1, .pr = 1};
    g.large_blocked = g.small_blocked = true;
    dnnl_common::OmpThreads threads(1);
    const Entry e = make_entry(Kind::forward, g, kF32, false);
    return !e.unusable;
  }();
  return native;
}

void set_conv_winograd(bool enabled) { winograd_flag().store(enabled ? 1 : 0, std::memory_order_relaxed); }

bool conv_winograd() { return winograd_flag().load(std::memory_order_relaxed) != 0; }

ConvCacheStats conv_cache_stats() {
  const ThreadState& ts = state();
  return {ts.cache.hits(), ts.cache.misses(), ts.cache.size(), ts.weight_reorders, ts.reorders_skipped};
}

}  // namespace kiln::backend::cpu
