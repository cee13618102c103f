// The plain reference of the small-sequence attention kernels
// (small_attention.h): per (b, h) and query row, the whole score row in f64.
#include <cmath>
#include <vector>

#include "kiln/core/dtype.h"
#include "src/backend/cpu/attention/small_attention.h"

namespace kiln::backend::cpu::ref {

namespace {

constexpr int64_t kP = kSmallAttentionMaxKeys;

// Element (b, h, i, c) of a 4-D tensor of C++ type T, read or written as f64.
template <class T>
struct View4 {
  T* p;
  Strides st;
  explicit View4(const Tensor& t) : p(static_cast<T*>(t.data_ptr())), st(t.strides()) {}
  T& at(int64_t b, int64_t h, int64_t i, int64_t c) const { return p[b * st[0] + h * st[1] + i * st[2] + c * st[3]]; }
};

template <class T>
void forward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
             const Tensor& probs) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  View4<T> Q(q), K(k), V(v), O(out);
  A* P = static_cast<A*>(probs.data_ptr());
  std::vector<double> row(size_t(s.Tk));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.Tq; ++i) {
        double m = -INFINITY;
        for (int64_t j = 0; j < s.Tk; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < s.Dh; ++c) dot += double(Q.at(b, h, i, c)) * double(K.at(b, h, j, c));
          row[size_t(j)] = dot * s.scale;
          m = std::max(m, row[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j < s.Tk; ++j) sum += (row[size_t(j)] = std::exp(row[size_t(j)] - m));
        A* p = P + ((b * s.H + h) * s.Tq + i) * kP;
        for (int64_t j = 0; j < kP; ++j) p[j] = j < s.Tk ? A(row[size_t(j)] / sum) : A(0);
        for (int64_t c = 0; c < s.Dv; ++c) {
          double o = 0;
          for (int64_t j = 0; j < s.Tk; ++j) o += row[size_t(j)] / sum * double(V.at(b, h, j, c));
          O.at(b, h, i, c) = T(o);
        }
      }
}

template <class T>
void backward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
              const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  View4<T> Q(q), K(k), V(v), G(dout), DQ(dq), DK(dk), DV(dv);
  const A* P = static_cast<const A*>(probs.data_ptr());
  std::vector<double> ds(size_t(s.Tq * s.Tk)), gq(size_t(s.Tq * s.Dh)), gk(size_t(s.Tk * s.Dh)),
      gv(size_t(s.Tk * s.Dv));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const A* ph = P + (b * s.H + h) * s.Tq * kP;
      std::fill(gk.begin(), gk.end(), 0.0);
      std::fill(gv.begin(), gv.end(), 0.0);
      for (int64_t i = 0; i < s.Tq; ++i) {
        double delta = 0;
        for (int64_t j = 0; j < s.Tk; ++j) {
          double dp = 0;
          for (int64_t c = 0; c < s.Dv; ++c) dp += double(G.at(b, h, i, c)) * double(V.at(b, h, j, c));
          ds[size_t(i * s.Tk + j)] = dp;
          delta += double(ph[i * kP + j]) * dp;
        }
        for (int64_t j = 0; j < s.Tk; ++j) {
          const double p = double(ph[i * kP + j]);
          ds[size_t(i * s.Tk + j)] = p * (ds[size_t(i * s.Tk + j)] - delta) * s.scale;
          for (int64_t c = 0; c < s.Dv; ++c) gv[size_t(j * s.Dv + c)] += p * double(G.at(b, h, i, c));
        }
      }
      for (int64_t i = 0; i < s.Tq; ++i)
        for (int64_t c = 0; c < s.Dh; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < s.Tk; ++j) acc += ds[size_t(i * s.Tk + j)] * double(K.at(b, h, j, c));
          gq[size_t(i * s.Dh + c)] = acc;
          for (int64_t j = 0; j < s.Tk; ++j) gk[size_t(j * s.Dh + c)] += ds[size_t(i * s.Tk + j)] * double(Q.at(b, h, i, c));
        }
      for (int64_t i = 0; i < s.Tq; ++i)
        for (int64_t c = 0; c < s.Dh; ++c) DQ.at(b, h, i, c) = T(gq[size_t(i * s.Dh + c)]);
      for (int64_t j = 0; j < s.Tk; ++j) {
        for (int64_t c = 0; c < s.Dh; ++c) DK.at(b, h, j, c) = T(gk[size_t(j * s.Dh + c)]);
        for (int64_t c = 0; c < s.Dv; ++c) DV.at(b, h, j, c) = T(gv[size_t(j * s.Dv + c)]);
      }
    }
}

template <class Fn>
void by_dtype(DType t, Fn&& fn) {
  if (t == kF32) fn(type_tag<float>{});
  else if (t == kF64) fn(type_tag<double>{});
  else fn(type_tag<bfloat16>{});
}

}  // namespace

void small_attention_forward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& probs) {
  by_dtype(q.dtype(), [&](auto tag) { forward<typename decltype(tag)::type>(s, q, k, v, out, probs); });
}

void small_attention_backward(const SmallAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& probs, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv) {
  by_dtype(q.dtype(), [&](auto tag) {
    backward<typename decltype(tag)::type>(s, q, k, v, probs, dout, dq, dk, dv);
  });
}

}  // namespace kiln::backend::cpu::ref
