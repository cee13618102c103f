// Random-tensor kernels: Philox blocks are made 16 at a time in lanes the
// compiler vectorises, then turned into values by small per-distribution
// functors shared with the reference kernels.
#include "src/backend/cpu/random/random.h"

#include <algorithm>
#include <array>
#include <bit>
#include <atomic>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/core/parallel.h"
#include "src/backend/cpu/dispatch.h"
#include "src/backend/cpu/loops.h"

namespace kiln::backend::cpu {

namespace {

constexpr int kTileBlocks = 16;
constexpr int kTileWords = 4 * kTileBlocks;
constexpr int64_t kGrainTiles = kParallelGrain / kTileWords;

// Words of blocks [first, first + 16) in stream order: out[4 * b + w].
// Lanes hold 32-bit words in 64-bit slots so the round loop vectorises to
// 32x32->64 multiplies (vpmuludq) across blocks.
void philox_tile(uint64_t seed, uint64_t first, uint32_t* out) {
  constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kLow = 0xffffffffu;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  alignas(64) uint64_t c0[kTileBlocks], c1[kTileBlocks], c2[kTileBlocks], c3[kTileBlocks];
  for (int l = 0; l < kTileBlocks; ++l) {
    uint64_t b = first + uint64_t(l);
    c0[l] = b & kLow;
    c1[l] = b >> 32;
    c2[l] = 0;
    c3[l] = 0;
  }
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t key0 = k0, key1 = k1;
#pragma GCC unroll 1
    for (int l = 0; l < kTileBlocks; ++l) {
      uint64_t p0 = kM0 * c0[l];
      uint64_t p1 = kM1 * c2[l];
      uint64_t n0 = (p1 >> 32) ^ c1[l] ^ key0;
      uint64_t n2 = (p0 >> 32) ^ c3[l] ^ key1;
      c1[l] = p1 & kLow;
      c3[l] = p0 & kLow;
      c0[l] = n0;
      c2[l] = n2;
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int l = 0; l < kTileBlocks; ++l) {
    out[4 * l + 0] = uint32_t(c0[l]);
    out[4 * l + 1] = uint32_t(c1[l]);
    out[4 * l + 2] = uint32_t(c2[l]);
    out[4 * l + 3] = uint32_t(c3[l]);
  }
}

// Calls fn(words, w0, nw) for consecutive tiles covering stream words
// [0, nwords): words[k] is stream word w0 + k. Tiles run in parallel.
template <class F>
void for_each_tile(uint64_t seed, uint64_t first_block, int64_t nwords, F&& fn) {
  int64_t ntiles = (nwords + kTileWords - 1) / kTileWords;
  parallel_for(0, ntiles, kGrainTiles, [&](int64_t lo, int64_t hi) {
    alignas(64) uint32_t buf[kTileWords];
    for (int64_t t = lo; t < hi; ++t) {
      philox_tile(seed, first_block + uint64_t(t) * kTileBlocks, buf);
      int64_t w0 = t * kTileWords;
      fn(buf, w0, std::min<int64_t>(kTileWords, nwords - w0));
    }
  });
}

// ---- words -> values ----

// U[0, 1) with as many bits as T's significand holds (so rounding to T never
// reaches 1): bf16 8 bits, f32 24 bits from one word; f64 53 bits from words
// (lo, hi).
template <class T>
acc_t<T> unit(const uint32_t* w) {
  if constexpr (std::is_same_v<T, double>) return double(((uint64_t(w[1]) << 32) | w[0]) >> 11) * 0x1p-53;
  else if constexpr (std::is_same_v<T, bfloat16>) return float(w[0] >> 24) * 0x1p-8f;
  else return float(w[0] >> 8) * 0x1p-24f;
}

// The largest T below h (h finite).
template <class T>
T below(T h) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    float f = h;
    if (f == 0.0f) return bfloat16::from_bits(0x8001);
    return bfloat16::from_bits(uint16_t(f > 0 ? h.bits - 1 : h.bits + 1));
  } else {
    return std::nextafter(h, -std::numeric_limits<T>::infinity());
  }
}

template <class T>
struct UniformOp {
  using A = acc_t<T>;
  A low, span, high;
  T top;        // largest T below high
  bool clamp;   // high > low: keep results below high after rounding
  UniformOp(double lo, double hi)
      : low(A(lo)), span(A(hi - lo)), high(A(hi)), top(below(T(A(hi)))), clamp(hi > lo) {}
  T operator()(const uint32_t* w) const {
    T v = T(low + span * unit<T>(w));
    return clamp && A(v) >= high ? top : v;
  }
};

// ---- Box–Muller: uniforms (u1, u2) -> r cos(2 pi u2), r sin(2 pi u2) with
// r = sqrt(-2 log u1). log and sincos are short polynomials (no libm calls)
// so the pair loop vectorises; A is float (f32, bf16) or double (f64). ----

// The uniforms of pair q from its words: u1 in (0, 1], u2 in [0, 1).
template <class A>
void pair_uniforms(const uint32_t* w, A& u1, A& u2) {
  if constexpr (std::is_same_v<A, double>) {
    u1 = double((((uint64_t(w[1]) << 32) | w[0]) >> 11) + 1) * 0x1p-53;
    u2 = double(((uint64_t(w[3]) << 32) | w[2]) >> 11) * 0x1p-53;
  } else {
    u1 = float((w[0] >> 8) + 1) * 0x1p-24f;
    u2 = float(w[1] >> 8) * 0x1p-24f;
  }
}

// log(u) for normal u in (0, 1]: u = 2^e m with m in [sqrt(1/2), sqrt(2)),
// log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716, as an odd series
// (truncation below 1e-9 relative for float, 1e-17 for double).
template <class A>
A log_unit(A u) {
  using U = std::conditional_t<std::is_same_v<A, double>, uint64_t, uint32_t>;
  using I = std::make_signed_t<U>;
  constexpr int kMant = std::is_same_v<A, double> ? 52 : 23;
  constexpr U kMantMask = (U(1) << kMant) - 1, kOne = std::bit_cast<U>(A(1));
  constexpr I kBias = std::is_same_v<A, double> ? 1023 : 127;
  U bits = std::bit_cast<U>(u);
  I e = I(bits >> kMant) - kBias;
  A m = std::bit_cast<A>(U((bits & kMantMask) | kOne));  // [1, 2)
  const bool big = m > A(1.4142135623730951);
  m = big ? m * A(0.5) : m;
  e = big ? e + 1 : e;
  A f = m - A(1);
  A t = f / (A(2) + f);
  A t2 = t * t;
  A series;
  if constexpr (std::is_same_v<A, double>) {
    series = t2 * (2.0 / 3 + t2 * (2.0 / 5 + t2 * (2.0 / 7 + t2 * (2.0 / 9 + t2 * (2.0 / 11 + t2 * (2.0 / 13 +
             t2 * (2.0 / 15 + t2 * (2.0 / 17 + t2 * (2.0 / 19)))))))));
  } else {
    series = t2 * (2.0f / 3 + t2 * (2.0f / 5 + t2 * (2.0f / 7 + t2 * (2.0f / 9))));
  }
  constexpr A kLn2Hi = A(0.693145751953125), kLn2Lo = A(1.4286068203094172321e-06);  // hi exact in float
  return A(e) * kLn2Hi + (A(e) * kLn2Lo + (A(2) * t + t * series));
}

// sin and cos of 2 pi u for u in [0, 1): quarter turns x = 4u = q + r with
// integer q and |r| <= 1/2 (exact), then Taylor series on |a| <= pi/4.
template <class A>
void sincos_turn(A u, A& sin_out, A& cos_out) {
  constexpr A kShift = std::is_same_v<A, double> ? 6755399441055744.0 : 12582912.0f;  // 1.5 * 2^mantissa
  A x = A(4) * u;
  A q = (x + kShift) - kShift;  // nearest integer (std::floor would keep the loop scalar)
  A a = (x - q) * A(std::numbers::pi / 2);
  A a2 = a * a;
  A s, c;
  if constexpr (std::is_same_v<A, double>) {
    s = a + a * a2 * (-1.0 / 6 + a2 * (1.0 / 120 + a2 * (-1.0 / 5040 + a2 * (1.0 / 362880 + a2 * (-1.0 / 39916800 +
        a2 * (1.0 / 6227020800 + a2 * (-1.0 / 1307674368000 + a2 * (1.0 / 355687428096000))))))));
    c = 1.0 + a2 * (-0.5 + a2 * (1.0 / 24 + a2 * (-1.0 / 720 + a2 * (1.0 / 40320 + a2 * (-1.0 / 3628800 +
        a2 * (1.0 / 479001600 + a2 * (-1.0 / 87178291200 + a2 * (1.0 / 20922789888000))))))));
  } else {
    s = a + a * a2 * (-1.0f / 6 + a2 * (1.0f / 120 + a2 * (-1.0f / 5040 + a2 * (1.0f / 362880))));
    c = 1.0f + a2 * (-0.5f + a2 * (1.0f / 24 + a2 * (-1.0f / 720 + a2 * (1.0f / 40320 + a2 * (-1.0f / 3628800)))));
  }
  const int quadrant = int(q) & 3;  // angle = quadrant * pi/2 + a
  sin_out = quadrant == 0 ? s : quadrant == 1 ? c : quadrant == 2 ? -s : -c;
  cos_out = quadrant == 0 ? c : quadrant == 1 ? -s : quadrant == 2 ? -c : s;
}

// sqrt(x) for x >= 0 by Newton steps on 1/sqrt(x) from the bit-trick guess
// (std::sqrt keeps loops scalar: it may set errno).
template <class A>
A sqrt_nonneg(A x) {
  using U = std::conditional_t<std::is_same_v<A, double>, uint64_t, uint32_t>;
  constexpr U kMagic = std::is_same_v<A, double> ? U(0x5fe6eb50c7b537a9ull) : U(0x5f3759dfu);
  constexpr int kSteps = std::is_same_v<A, double> ? 4 : 3;  // relative error 0.034 squares each step
  const A xs = x < A(1e-30) ? A(1e-30) : x;                   // sqrt(0) = 0 * finite
  A y = std::bit_cast<A>(U(kMagic - (std::bit_cast<U>(xs) >> 1)));
  for (int k = 0; k < kSteps; ++k) y = y * (A(1.5) - A(0.5) * xs * y * y);
  return x * y;
}

// Normals of `pairs` (<= kTileWords / 2) pairs from their words into
// z[2 * pairs]. The uniforms are split out first so that the math runs on
// plain arrays and vectorises.
template <class A>
void normal_pairs(const uint32_t* w, int64_t pairs, A mean, A std, A* z) {
  constexpr int pw = std::is_same_v<A, double> ? 4 : 2;  // words per pair
  alignas(64) A u1[kTileWords / 2], u2[kTileWords / 2], zc[kTileWords / 2], zs[kTileWords / 2];
  for (int64_t q = 0; q < pairs; ++q) pair_uniforms(w + pw * q, u1[q], u2[q]);
  for (int64_t q = 0; q < pairs; ++q) {
    A s, c;
    A r = std * sqrt_nonneg(A(-2) * log_unit(u1[q]));
    sincos_turn(u2[q], s, c);
    zc[q] = mean + r * c;
    zs[q] = mean + r * s;
  }
  for (int64_t q = 0; q < pairs; ++q) {
    z[2 * q] = zc[q];
    z[2 * q + 1] = zs[q];
  }
}

template <class T>
struct RandintOp {
  int64_t low;
  uint64_t range;
  bool wide;  // range > 2^32: 64 random bits per element
  T operator()(const uint32_t* w) const {
    uint64_t v = wide ? uint64_t((unsigned __int128)((uint64_t(w[1]) << 32) | w[0]) * range >> 64)
                      : (uint64_t(w[0]) * range) >> 32;
    int64_t x = int64_t(uint64_t(low) + v);
    if constexpr (std::is_integral_v<T>) return T(x);
    else return T(acc_t<T>(x));
  }
};

template <class T>
T bernoulli_value(uint32_t w, double p) {
  return double(w) * 0x1p-32 < p ? T(1) : T(0);
}

}  // namespace

int64_t uniform_words(DType dtype, int64_t n) { return dtype == kF64 ? 2 * n : n; }
int64_t normal_words(DType dtype, int64_t n) { return dtype == kF64 ? 4 * ((n + 1) / 2) : 2 * ((n + 1) / 2); }
int64_t randint_words(uint64_t range, int64_t n) { return range > (uint64_t(1) << 32) ? 2 * n : n; }

void uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t first_block) {
  dispatch_only<bfloat16, float, double>(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int k = std::is_same_v<T, double> ? 2 : 1;
    const UniformOp<T> op(low, high);
    T* o = out.data<T>();
    for_each_tile(seed, first_block, uniform_words(out.dtype(), out.numel()),
                  [&](const uint32_t* w, int64_t w0, int64_t nw) {
                    T* dst = o + w0 / k;
                    for (int64_t e = 0; e < nw / k; ++e) dst[e] = op(w + k * e);
                  });
  });
}

void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t first_block) {
  dispatch_only<bfloat16, float, double>(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    constexpr int pw = std::is_same_v<T, double> ? 4 : 2;  // words per pair
    T* o = out.data<T>();
    const int64_t n = out.numel();
    for_each_tile(seed, first_block, normal_words(out.dtype(), n), [&](const uint32_t* w, int64_t w0, int64_t nw) {
      alignas(64) A z[kTileWords];
      normal_pairs<A>(w, nw / pw, A(mean), A(std), z);
      const int64_t e0 = 2 * (w0 / pw), count = std::min<int64_t>(2 * (nw / pw), n - e0);
      for (int64_t e = 0; e < count; ++e) o[e0 + e] = T(z[e]);
    });
  });
}

void randint(const Tensor& out, int64_t low, uint64_t range, uint64_t seed, uint64_t first_block) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const RandintOp<T> op{low, range, range > (uint64_t(1) << 32)};
      const int k = op.wide ? 2 : 1;
      T* o = out.data<T>();
      for_each_tile(seed, first_block, randint_words(range, out.numel()),
                    [&](const uint32_t* w, int64_t w0, int64_t nw) {
                      T* dst = o + w0 / k;
                      for (int64_t e = 0; e < nw / k; ++e) dst[e] = op(w + k * e);
                    });
    }
  });
}

bool bernoulli(const Tensor& out, const Tensor& p, uint64_t seed, uint64_t first_block) {
  std::atomic<bool> ok{true};
  dispatch(out.dtype(), [&](auto otag) {
    using T = typename decltype(otag)::type;
    dispatch_only<bfloat16, float, double>(p.dtype(), [&](auto ptag) {
      using P = typename decltype(ptag)::type;
      T* o = out.data<T>();
      const P* pr = p.data<P>();
      for_each_tile(seed, first_block, out.numel(), [&](const uint32_t* w, int64_t w0, int64_t nw) {
        bool good = true;
        for (int64_t e = 0; e < nw; ++e) {
          double pe = double(acc_t<P>(pr[w0 + e]));
          good &= pe >= 0.0 && pe <= 1.0;  // false for NaN too
          o[w0 + e] = bernoulli_value<T>(w[e], pe);
        }
        if (!good) ok.store(false, std::memory_order_relaxed);
      });
    });
  });
  return ok.load();
}

void bernoulli(const Tensor& out, double p, uint64_t seed, uint64_t first_block) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    for_each_tile(seed, first_block, out.numel(), [&](const uint32_t* w, int64_t w0, int64_t nw) {
      for (int64_t e = 0; e < nw; ++e) o[w0 + e] = bernoulli_value<T>(w[e], p);
    });
  });
}

void randperm(const Tensor& out, uint64_t seed, uint64_t first_block) {
  int64_t* o = out.data<int64_t>();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) o[i] = i;
  // Fisher–Yates, sequential: step s (i = n-1-s) swaps o[i] with o[j], j
  // uniform in [0, i] from the 64 bits of words 2s, 2s+1.
  alignas(64) uint32_t buf[kTileWords];
  for (int64_t s = 0; s + 1 < n; ++s) {
    int64_t word = 2 * s;
    if (word % kTileWords == 0) philox_tile(seed, first_block + uint64_t(word / 4), buf);
    const uint32_t* w = buf + word % kTileWords;
    int64_t i = n - 1 - s;
    auto j = int64_t((unsigned __int128)((uint64_t(w[1]) << 32) | w[0]) * uint64_t(i + 1) >> 64);
    std::swap(o[i], o[j]);
  }
}

namespace ref {

uint32_t word(uint64_t seed, uint64_t first_block, int64_t j) {
  Generator g(seed);
  return g.block(first_block + uint64_t(j) / 4)[size_t(j % 4)];
}

namespace {
// Words [j, j + k) of the stream.
template <int K>
std::array<uint32_t, K> words(uint64_t seed, uint64_t first_block, int64_t j) {
  std::array<uint32_t, K> w{};
  for (int i = 0; i < K; ++i) w[size_t(i)] = word(seed, first_block, j + i);
  return w;
}
}  // namespace

void uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t first_block) {
  dispatch_only<bfloat16, float, double>(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const UniformOp<T> op(low, high);
    for (int64_t e = 0; e < out.numel(); ++e) {
      auto w = words<2>(seed, first_block, std::is_same_v<T, double> ? 2 * e : e);
      out.data<T>()[e] = op(w.data());
    }
  });
}

void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t first_block) {
  // Box–Muller with libm's log, cos and sin.
  dispatch_only<bfloat16, float, double>(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    constexpr int pw = std::is_same_v<T, double> ? 4 : 2;
    for (int64_t e = 0; e < out.numel(); ++e) {
      auto w = words<4>(seed, first_block, pw * (e / 2));
      A u1, u2;
      pair_uniforms(w.data(), u1, u2);
      A r = A(std) * std::sqrt(A(-2) * std::log(u1));
      A theta = A(2 * std::numbers::pi) * u2;
      out.data<T>()[e] = T(A(mean) + r * (e % 2 == 0 ? std::cos(theta) : std::sin(theta)));
    }
  });
}

void randint(const Tensor& out, int64_t low, uint64_t range, uint64_t seed, uint64_t first_block) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const RandintOp<T> op{low, range, range > (uint64_t(1) << 32)};
      for (int64_t e = 0; e < out.numel(); ++e) {
        auto w = words<2>(seed, first_block, op.wide ? 2 * e : e);
        out.data<T>()[e] = op(w.data());
      }
    }
  });
}

void bernoulli(const Tensor& out, const Tensor& p, uint64_t seed, uint64_t first_block) {
  std::vector<double> pv = p.to_vector<double>();
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t e = 0; e < out.numel(); ++e)
      out.data<T>()[e] = bernoulli_value<T>(word(seed, first_block, e), pv[size_t(e)]);
  });
}

}  // namespace ref

}  // namespace kiln::backend::cpu
