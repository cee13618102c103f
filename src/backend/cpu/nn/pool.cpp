// CPU pooling: max with argmax, 2x2 stride-2 max with one-byte taps (NOTE
// [2x2 max pooling] in pool.h), average through window tables, their
// gradients, and the plain ref:: loops. Planes [H, W] are independent, so
// every kernel runs parallel over planes (the 2x2 ones over row pairs);
// inner loops run along an output row so they vectorize.
#include "src/backend/cpu/nn/pool.h"

#include <bit>
#include <cmath>
#include <type_traits>
#include <limits>

#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"

namespace kiln::backend::cpu {

namespace {

// Planes per parallel task: about 32K elements of input each.
int64_t plane_grain(int64_t plane) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(plane, 1)); }

// mask ? a : b for a mask of all ones or all zeros, without a branch.
template <class A>
A select_bits(int64_t mask, A a, A b) {
  using U = std::conditional_t<sizeof(A) == 4, uint32_t, uint64_t>;
  const U m = U(mask);
  return std::bit_cast<A>(U((std::bit_cast<U>(a) & m) | (std::bit_cast<U>(b) & ~m)));
}

}  // namespace

void max_pool2d(const MaxPoolGeom& g, const Tensor& x_in, const Tensor& out, const Tensor& indices) {
  if (out.numel() == 0) return;
  constexpr int64_t kLanes = 8;
  Tensor x = x_in.contiguous();
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    int64_t* ip = static_cast<int64_t*>(indices.data_ptr());
    // Per output row / column: the first tap index and the range of taps
    // that land inside the plane (dilation skips whole taps). Computed once
    // per call: the divisions would otherwise dominate small windows.
    std::vector<int64_t> rows(static_cast<size_t>(3 * g.OH)), cols(static_cast<size_t>(3 * g.OW));
    auto taps = [](int64_t start, int64_t k, int64_t d, int64_t n, int64_t* t) {
      t[0] = start;
      t[1] = start < 0 ? (-start + d - 1) / d : 0;
      t[2] = std::min(k, (n - 1 - start) / d + 1);
    };
    for (int64_t oh = 0; oh < g.OH; ++oh) taps(oh * g.sh - g.ph, g.kh, g.dh, g.H, &rows[size_t(3 * oh)]);
    for (int64_t ow = 0; ow < g.OW; ++ow) taps(ow * g.sw - g.pw, g.kw, g.dw, g.W, &cols[size_t(3 * ow)]);
    parallel_for(0, g.N, plane_grain(g.H * g.W), [&](int64_t lo, int64_t hi) {
      for (int64_t n = lo; n < hi; ++n) {
        const T* plane = xp + n * g.H * g.W;
        T* orow = op + n * g.OH * g.OW;
        int64_t* irow = ip + n * g.OH * g.OW;
        for (int64_t oh = 0; oh < g.OH; ++oh, orow += g.OW, irow += g.OW) {
          const int64_t ih0 = rows[size_t(3 * oh)], kh0 = rows[size_t(3 * oh + 1)], kh1 = rows[size_t(3 * oh + 2)];
          // Interior columns [a, b) in blocks of kLanes: every tap is inside,
          // taps run outside and the block inside, which vectorizes.
          int64_t ow = 0;
          for (; ow < g.OW && cols[size_t(3 * ow + 1)] != 0; ++ow) {}
          const int64_t a = ow;
          int64_t b = a;
          while (b + kLanes <= g.OW && cols[size_t(3 * (b + kLanes - 1) + 2)] == g.kw) b += kLanes;
          for (int64_t c0 = a; c0 < b; c0 += kLanes) {
            A m[kLanes];
            int64_t mi[kLanes];
            const int64_t first = (ih0 + kh0 * g.dh) * g.W + cols[size_t(3 * c0)];
#pragma omp simd
            for (int64_t j = 0; j < kLanes; ++j) {
              m[j] = A(plane[first + j * g.sw]);
              mi[j] = first + j * g.sw;
            }
            for (int64_t kh = kh0; kh < kh1; ++kh)
              for (int64_t kw = (kh == kh0 ? 1 : 0); kw < g.kw; ++kw) {
                const int64_t at0 = (ih0 + kh * g.dh) * g.W + cols[size_t(3 * c0)] + kw * g.dw;
#pragma omp simd
                for (int64_t j = 0; j < kLanes; ++j) {
                  const A v = A(plane[at0 + j * g.sw]);
                  const bool take = (v > m[j]) | (v != v);  // ties keep the first tap; a NaN wins
                  m[j] = take ? v : m[j];
                  mi[j] = take ? at0 + j * g.sw : mi[j];
                }
              }
            for (int64_t j = 0; j < kLanes; ++j) {
              orow[c0 + j] = T(m[j]);
              irow[c0 + j] = mi[j];
            }
          }
          for (ow = 0; ow < g.OW; ++ow) {
            if (ow == a) ow = b;
            if (ow >= g.OW) break;
            const int64_t iw0 = cols[size_t(3 * ow)], kw0 = cols[size_t(3 * ow + 1)], kw1 = cols[size_t(3 * ow + 2)];
            // Taps in PyTorch's raster order; the update is branch-free
            // (random data mispredicts every branch).
            A best = -std::numeric_limits<A>::infinity();
            int64_t arg = (ih0 + kh0 * g.dh) * g.W + iw0 + kw0 * g.dw;
            for (int64_t kh = kh0; kh < kh1; ++kh) {
              const int64_t base = (ih0 + kh * g.dh) * g.W + iw0;
              for (int64_t kw = kw0; kw < kw1; ++kw) {
                const int64_t at = base + kw * g.dw;
                const A v = A(plane[at]);
                // Ties keep the first tap; a NaN wins. Selected through masks:
                // GCC turns ?: here into branches.
                const int64_t take = -int64_t((v > best) | (v != v));
                best = select_bits(take, v, best);
                arg = (at & take) | (arg & ~take);
              }
            }
            orow[ow] = T(best);
            irow[ow] = arg;
          }
        }
      }
    });
  });
}

void max_pool2d_backward(const MaxPoolGeom& g, const Tensor& grad_out, const Tensor& indices_in,
                         const Tensor& grad_in) {
  if (grad_in.numel() == 0) return;
  Tensor go = grad_out.contiguous(), idx = indices_in.contiguous();
  dispatch_only<bfloat16, float, double>(grad_in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(go.data_ptr());
    const int64_t* ip = static_cast<const int64_t*>(idx.data_ptr());
    T* xp = static_cast<T*>(grad_in.data_ptr());
    const int64_t plane = g.H * g.W, oplane = g.OH * g.OW;
    parallel_for(0, g.N, plane_grain(plane), [&](int64_t lo, int64_t hi) {
      for (int64_t n = lo; n < hi; ++n) {
        T* gx = xp + n * plane;
        std::fill(gx, gx + plane, T(0));
        const T* gy = gp + n * oplane;
        const int64_t* id = ip + n * oplane;
        for (int64_t i = 0; i < oplane; ++i) gx[id[i]] = T(A(gx[id[i]]) + A(gy[i]));  // windows may overlap
      }
    });
  });
}

bool is_max_pool_2x2(const MaxPoolGeom& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 && g.dh == 1 && g.dw == 1 &&
         2 * g.OH <= g.H && 2 * g.OW <= g.W;
}

// NOTE [2x2 max pooling] in pool.h. Work is split over row pairs (n, oh):
// N * OH of them, each reading 2 * W inputs. CNN rows are short (OW 14 or 7
// at 28x28 and 14x14), too short for a vectorized loop over a row with a
// scalar tail: the kernels run blocks of a fixed number of outputs instead, the last
// block of a row shifted back to end on the row's last output (it recomputes
// a few outputs, with the same values). A row shorter than a block runs a
// whole block too, reading past the row while that stays inside the tensor;
// the extra lanes are written into later rows of the same parallel task
// (which rewrite them afterwards) or, near the task's end, into local
// buffers. Only the last rows of a tensor go one output at a time.
namespace {

// Outputs per block: measured on cnn_b64's pools, GCC's code for 16 forward
// outputs is 110 instructions, for 8 it is 169; the backward is fastest with
// 8 (its short rows go through local buffers, which cost more when wider).
constexpr int64_t kFwdBlock = 16, kBwdBlock = 8;

int64_t row_pair_grain(int64_t W) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(2 * W, 1)); }

// n outputs (a fixed trip count the compiler vectorizes) of a row pair: o[j],
// t[j] from top[2j], top[2j + 1], bot[2j], bot[2j + 1] in max_pool2d's raster
// order: a later tap takes over when strictly larger or NaN (ties keep the
// first; the last NaN wins). __restrict (t is a byte pointer, which may alias
// anything) and noinline (inlined, the restrict is lost) let it vectorize.
template <class T, int64_t n>
[[gnu::noinline]] void max4(const T* __restrict top, const T* __restrict bot, T* __restrict o, uint8_t* __restrict t) {
  using A = acc_t<T>;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const A a = A(top[2 * j]), b = A(top[2 * j + 1]), c = A(bot[2 * j]), d = A(bot[2 * j + 1]);
    A m = a;
    int32_t k = 0;
    bool take = (b > m) | (b != b);
    m = take ? b : m, k = take ? 1 : k;
    take = (c > m) | (c != c);
    m = take ? c : m, k = take ? 2 : k;
    take = (d > m) | (d != d);
    m = take ? d : m, k = take ? 3 : k;
    // bf16: m is one of the inputs, exact in f32; take its top 16 bits (NaN
    // included) instead of rounding, whose NaN branch kept this loop scalar
    // (42% of a bf16 cnn_b64 step, 1 thread; docs/mixed_precision.md).
    if constexpr (std::is_same_v<T, bfloat16>) o[j] = bfloat16::from_bits(uint16_t(std::bit_cast<uint32_t>(m) >> 16));
    else o[j] = T(m);
    t[j] = uint8_t(k);
  }
}

// The backward of max4: each of the 4n inputs written once, the gradient or
// +0. Selected on the bits (v & mask): with ?: GCC keeps branches here and
// does not vectorize.
template <class T, int64_t n>
[[gnu::noinline]] void scatter4(const T* __restrict gy, const uint8_t* __restrict t, T* __restrict top,
                                T* __restrict bot) {
  using U = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const U v = std::bit_cast<U>(gy[j]), k = t[j];
    top[2 * j] = std::bit_cast<T>(U(v & (U(0) - U(k == 0))));
    top[2 * j + 1] = std::bit_cast<T>(U(v & (U(0) - U(k == 1))));
    bot[2 * j] = std::bit_cast<T>(U(v & (U(0) - U(k == 2))));
    bot[2 * j + 1] = std::bit_cast<T>(U(v & (U(0) - U(k == 3))));
  }
}

// Copies the first n of kLen elements; a fixed trip count so GCC emits
// no memmove call (which costs more than the copy for 7 elements).
template <int64_t kLen, class T>
inline void copy_first(const T* from, T* to, int64_t n) {
  for (int64_t j = 0; j < kLen; ++j)
    if (j < n) to[j] = from[j];
}

}  // namespace

void max_pool2d_2x2(const MaxPoolGeom& g, const Tensor& x_in, const Tensor& out, const Tensor& taps) {
  if (out.numel() == 0) return;
  Tensor x = x_in.contiguous();
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* x_end = xp + g.N * g.H * g.W;
    T* op = static_cast<T*>(out.data_ptr());
    uint8_t* tp = static_cast<uint8_t*>(taps.data_ptr());
    const int64_t W = g.W, OW = g.OW;
    parallel_for(0, g.N * g.OH, row_pair_grain(W), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t n = r / g.OH, oh = r % g.OH;
        const T* top = xp + (n * g.H + 2 * oh) * W;
        const T* bot = top + W;
        T* o = op + r * OW;
        uint8_t* t = tp + r * OW;
        if (OW >= kFwdBlock) {
          for (int64_t j = 0; j < OW; j += kFwdBlock) {
            const int64_t j0 = std::min(j, OW - kFwdBlock);
            max4<T, kFwdBlock>(top + 2 * j0, bot + 2 * j0, o + j0, t + j0);
          }
        } else if (bot + 2 * kFwdBlock <= x_end && r * OW + kFwdBlock <= hi * OW) {
          // Whole block straight into the output: the lanes past the row
          // land in later rows of this task, which rewrite them.
          max4<T, kFwdBlock>(top, bot, o, t);
        } else if (bot + 2 * kFwdBlock <= x_end) {
          T ob[kFwdBlock];
          uint8_t tb[kFwdBlock];
          max4<T, kFwdBlock>(top, bot, ob, tb);
          copy_first<kFwdBlock>(ob, o, OW), copy_first<kFwdBlock>(tb, t, OW);
        } else {
          for (int64_t j = 0; j < OW; ++j) max4<T, 1>(top + 2 * j, bot + 2 * j, o + j, t + j);
        }
      }
    });
  });
}

void max_pool2d_2x2_backward(const MaxPoolGeom& g, const Tensor& grad_out, const Tensor& taps_in,
                             const Tensor& grad_in) {
  if (grad_in.numel() == 0) return;
  Tensor go = grad_out.contiguous(), taps = taps_in.contiguous();
  dispatch_only<bfloat16, float, double>(grad_in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = static_cast<const T*>(go.data_ptr());
    const uint8_t* tp = static_cast<const uint8_t*>(taps.data_ptr());
    T* xp = static_cast<T*>(grad_in.data_ptr());
    const int64_t H = g.H, W = g.W, OH = g.OH, OW = g.OW;
    // Row pairs, then per plane the rows below the last pair (odd H).
    const int64_t rows = g.N * OH;
    auto top_of = [&](int64_t r) { return xp + ((r / OH) * H + 2 * (r % OH)) * W; };
    parallel_for(0, rows, row_pair_grain(W), [&](int64_t lo, int64_t hi) {
      // Past the last row pair of this task: writes must stop here.
      const T* task_end = hi < rows ? top_of(hi) : xp + g.N * H * W;
      for (int64_t r = lo; r < hi; ++r) {
        T* top = top_of(r);
        T* bot = top + W;
        const T* gy = gp + r * OW;
        const uint8_t* t = tp + r * OW;
        if (OW >= kBwdBlock) {
          for (int64_t j = 0; j < OW; j += kBwdBlock) {
            const int64_t j0 = std::min(j, OW - kBwdBlock);
            scatter4<T, kBwdBlock>(gy + j0, t + j0, top + 2 * j0, bot + 2 * j0);
          }
        } else if (bot + 2 * kBwdBlock <= task_end && r * OW + kBwdBlock <= rows * OW) {
          // A short row, whole blocks: reads past the row stay in grad_out
          // and taps; the top block's spill lands in the bottom row, which
          // the bottom block then overwrites, whose spill lands in later row
          // pairs of this task (or rows zeroed below), rewritten in turn.
          T tb[2 * kBwdBlock], bb[2 * kBwdBlock];
          scatter4<T, kBwdBlock>(gy, t, tb, bb);
          for (int64_t j = 0; j < 2 * kBwdBlock; ++j) top[j] = tb[j];
          for (int64_t j = 0; j < 2 * kBwdBlock; ++j) bot[j] = bb[j];
        } else {
          T gb[kBwdBlock] = {}, tb[2 * kBwdBlock], bb[2 * kBwdBlock];
          uint8_t kb[kBwdBlock] = {};
          copy_first<kBwdBlock>(gy, gb, OW), copy_first<kBwdBlock>(t, kb, OW);
          scatter4<T, kBwdBlock>(gb, kb, tb, bb);
          copy_first<2 * kBwdBlock>(tb, top, 2 * OW), copy_first<2 * kBwdBlock>(bb, bot, 2 * OW);
        }
        for (int64_t w = 2 * OW; w < W; ++w) top[w] = bot[w] = T(0);  // odd W: the last column
      }
    });
    if (2 * OH < H)
      for (int64_t n = 0; n < g.N; ++n) std::fill(xp + (n * H + 2 * OH) * W, xp + (n + 1) * H * W, T(0));
  });
}

void max_pool2d_2x2_indices(const MaxPoolGeom& g, const Tensor& taps_in, const Tensor& indices) {
  Tensor taps = taps_in.contiguous();
  const uint8_t* tp = static_cast<const uint8_t*>(taps.data_ptr());
  int64_t* ip = static_cast<int64_t*>(indices.data_ptr());
  const int64_t W = g.W, OW = g.OW;
  parallel_for(0, g.N * g.OH, row_pair_grain(W), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t oh = r % g.OH;
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t k = tp[r * OW + j];
        ip[r * OW + j] = (2 * oh + k / 2) * W + 2 * j + k % 2;
      }
    }
  });
}

void avg_pool2d(const AvgWindows& w, const Tensor& x_in, const Tensor& out) {
  if (out.numel() == 0) return;
  Tensor x = x_in.contiguous();
  const int64_t OH = w.OH(), OW = w.OW();
  dispatch_only<bfloat16, float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    parallel_for(0, w.N, plane_grain(w.H * w.W), [&](int64_t lo, int64_t hi) {
      std::vector<A> acc(static_cast<size_t>(OW));
      for (int64_t n = lo; n < hi; ++n) {
        const T* plane = xp + n * w.H * w.W;
        for (int64_t oh = 0; oh < OH; ++oh) {
          std::fill(acc.begin(), acc.end(), A(0));
          for (int64_t h = w.h0[size_t(oh)]; h < w.h1[size_t(oh)]; ++h) {
            const T* row = plane + h * w.W;
            for (int64_t ow = 0; ow < OW; ++ow) {
              A s = 0;
              for (int64_t c = w.w0[size_t(ow)]; c < w.w1[size_t(ow)]; ++c) s += A(row[c]);
              acc[size_t(ow)] += s;
            }
          }
          T* orow = op + (n * OH + oh) * OW;
          const A hn = A(w.hn[size_t(oh)]);
          for (int64_t ow = 0; ow < OW; ++ow) orow[ow] = T(acc[size_t(ow)] / (hn * A(w.wn[size_t(ow)])));
        }
      }
    });
  });
}

void avg_pool2d_backward(const AvgWindows& w, const Tensor& grad_out, const Tensor& grad_in) {
  if (grad_in.numel() == 0) return;
  Tensor go = grad_out.contiguous();
  const int64_t OH = w.OH(), OW = w.OW(), plane = w.H * w.W;
  dispatch_only<bfloat16, float, double>(grad_in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* gp = static_cast<const T*>(go.data_ptr());
    T* xp = static_cast<T*>(grad_in.data_ptr());
    parallel_for(0, w.N, plane_grain(plane), [&](int64_t lo, int64_t hi) {
      std::vector<A> acc(static_cast<size_t>(plane));  // in acc_t so bf16 overlaps do not round at every add
      for (int64_t n = lo; n < hi; ++n) {
        std::fill(acc.begin(), acc.end(), A(0));
        const T* gy = gp + n * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh) {
          const A hn = A(w.hn[size_t(oh)]);
          for (int64_t ow = 0; ow < OW; ++ow) {
            const A v = A(gy[oh * OW + ow]) / (hn * A(w.wn[size_t(ow)]));
            for (int64_t h = w.h0[size_t(oh)]; h < w.h1[size_t(oh)]; ++h) {
              A* row = acc.data() + h * w.W;
#pragma omp simd
              for (int64_t c = w.w0[size_t(ow)]; c < w.w1[size_t(ow)]; ++c) row[c] += v;
            }
          }
        }
        T* gx = xp + n * plane;
        for (int64_t i = 0; i < plane; ++i) gx[i] = T(acc[size_t(i)]);
      }
    });
  });
}

}  // namespace kiln::backend::cpu
