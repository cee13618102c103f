// Random-tensor kernels: Philox blocks are made 16 at a time in lanes the
// compiler vectorises, then turned into values by small per-distribution
// functors shared with the reference kernels.
#include "src/ops/cpu/random.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/core/parallel.h"
#include "src/ops/cpu/loops.h"

namespace kiln::cpu {

namespace {

constexpr int kTileBlocks = 16;
constexpr int kTileWords = 4 * kTileBlocks;
constexpr int64_t kGrainTiles = kParallelGrain / kTileWords;

// Words of blocks [first, first + 16) in stream order: out[4 * b + w].
void philox_tile(uint64_t seed, uint64_t first, uint32_t* out) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  alignas(64) uint32_t c0[kTileBlocks], c1[kTileBlocks], c2[kTileBlocks], c3[kTileBlocks];
  for (int l = 0; l < kTileBlocks; ++l) {
    uint64_t b = first + uint64_t(l);
    c0[l] = uint32_t(b);
    c1[l] = uint32_t(b >> 32);
    c2[l] = 0;
    c3[l] = 0;
  }
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int l = 0; l < kTileBlocks; ++l) {
      uint64_t p0 = uint64_t(kM0) * c0[l];
      uint64_t p1 = uint64_t(kM1) * c2[l];
      uint32_t n0 = uint32_t(p1 >> 32) ^ c1[l] ^ k0;
      uint32_t n2 = uint32_t(p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = uint32_t(p1);
      c3[l] = uint32_t(p0);
      c0[l] = n0;
      c2[l] = n2;
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int l = 0; l < kTileBlocks; ++l) {
    out[4 * l + 0] = c0[l];
    out[4 * l + 1] = c1[l];
    out[4 * l + 2] = c2[l];
    out[4 * l + 3] = c3[l];
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

// Box–Muller: two uniforms give two independent normals.
template <class T>
struct NormalOp {
  using A = acc_t<T>;
  A mean, std;
  static constexpr int kPairWords = std::is_same_v<T, double> ? 4 : 2;
  void operator()(const uint32_t* w, T& z0, T& z1) const {
    A u1, u2;
    if constexpr (std::is_same_v<T, double>) {
      u1 = double((((uint64_t(w[1]) << 32) | w[0]) >> 11) + 1) * 0x1p-53;  // (0, 1]
      u2 = double(((uint64_t(w[3]) << 32) | w[2]) >> 11) * 0x1p-53;
    } else {
      u1 = float((w[0] >> 8) + 1) * 0x1p-24f;
      u2 = float(w[1] >> 8) * 0x1p-24f;
    }
    A r = std::sqrt(A(-2) * std::log(u1));
    A theta = A(2 * std::numbers::pi) * u2;
    z0 = T(mean + std * r * std::cos(theta));
    z1 = T(mean + std * r * std::sin(theta));
  }
};

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

template <class Fn>
void dispatch_floating(const Tensor& t, Fn&& fn) {
  dispatch(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bfloat16>) fn(tag);
  });
}

}  // namespace

int64_t uniform_words(DType dtype, int64_t n) { return dtype == kF64 ? 2 * n : n; }
int64_t normal_words(DType dtype, int64_t n) { return dtype == kF64 ? 4 * ((n + 1) / 2) : 2 * ((n + 1) / 2); }
int64_t randint_words(uint64_t range, int64_t n) { return range > (uint64_t(1) << 32) ? 2 * n : n; }

void uniform(const Tensor& out, double low, double high, uint64_t seed, uint64_t first_block) {
  dispatch_floating(out, [&](auto tag) {
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
  dispatch_floating(out, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const NormalOp<T> op{acc_t<T>(mean), acc_t<T>(std)};
    constexpr int pw = NormalOp<T>::kPairWords;
    T* o = out.data<T>();
    const int64_t n = out.numel();
    for_each_tile(seed, first_block, normal_words(out.dtype(), n), [&](const uint32_t* w, int64_t w0, int64_t nw) {
      for (int64_t q = 0; q < nw / pw; ++q) {
        int64_t e = 2 * (w0 / pw + q);
        T z0, z1;
        op(w + pw * q, z0, z1);
        o[e] = z0;
        if (e + 1 < n) o[e + 1] = z1;
      }
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
    dispatch_floating(p, [&](auto ptag) {
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
  dispatch_floating(out, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const UniformOp<T> op(low, high);
    for (int64_t e = 0; e < out.numel(); ++e) {
      auto w = words<2>(seed, first_block, std::is_same_v<T, double> ? 2 * e : e);
      out.data<T>()[e] = op(w.data());
    }
  });
}

void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t first_block) {
  dispatch_floating(out, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const NormalOp<T> op{acc_t<T>(mean), acc_t<T>(std)};
    constexpr int pw = NormalOp<T>::kPairWords;
    for (int64_t e = 0; e < out.numel(); ++e) {
      auto w = words<4>(seed, first_block, pw * (e / 2));
      T z[2];
      op(w.data(), z[0], z[1]);
      out.data<T>()[e] = z[e % 2];
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

}  // namespace kiln::cpu
