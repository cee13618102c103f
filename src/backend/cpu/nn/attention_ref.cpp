// The plain reference of CPU flash attention (attention.cpp): one query row
// at a time with its whole score row materialised, in f64.
#include "src/backend/cpu/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/core/error.h"
#include "src/backend/cpu/dispatch.h"

namespace kiln::backend::cpu {

namespace ref {

namespace {

// Whether key j is allowed for query i of head (b, h).
bool allowed(const AttentionShape& s, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (s.causal && j > i + (s.Tk - s.Tq)) return false;
  if (!s.mask.defined()) return true;
  const Strides& st = s.mask.strides();
  return static_cast<const bool*>(s.mask.data_ptr())[b * st[0] + h * st[1] + i * st[2] + j * st[3]];
}

// Scaled scores of query row i against every key (-inf where not allowed).
template <class A>
void score_row(const AttentionShape& s, const A* q, const A* k, int64_t b, int64_t h, int64_t i,
               std::vector<double>& row) {
  const int64_t bh = b * s.H + h;
  row.assign(size_t(s.Tk), -INFINITY);
  for (int64_t j = 0; j < s.Tk; ++j) {
    if (!allowed(s, b, h, i, j)) continue;
    double dot = 0;
    for (int64_t c = 0; c < s.Dh; ++c) dot += double(q[(bh * s.Tq + i) * s.Dh + c]) * double(k[(bh * s.Tk + j) * s.Dh + c]);
    row[size_t(j)] = dot * s.scale;
  }
}

}  // namespace

void flash_attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse) {
  dispatch_only<float, double>(q.dtype(), [&](auto tag) {
    using A = typename decltype(tag)::type;
    const A *qp = q.data<A>(), *kp = k.data<A>(), *vp = v.data<A>();
    A *op = out.data<A>(), *lp = lse.data<A>();
    std::vector<double> row;
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t i = 0; i < s.Tq; ++i) {
          const int64_t bh = b * s.H + h;
          score_row(s, qp, kp, b, h, i, row);
          double m = -INFINITY;
          for (double x : row) m = std::max(m, x);
          A* orow = op + (bh * s.Tq + i) * s.Dv;
          if (m == -INFINITY) {
            std::fill(orow, orow + s.Dv, A(0));
            lp[bh * s.Tq + i] = A(INFINITY);
            continue;
          }
          double l = 0;
          for (double& x : row) l += (x = std::exp(x - m));
          for (int64_t c = 0; c < s.Dv; ++c) {
            double acc = 0;
            for (int64_t j = 0; j < s.Tk; ++j) acc += row[size_t(j)] * double(vp[(bh * s.Tk + j) * s.Dv + c]);
            orow[c] = A(acc / l);
          }
          lp[bh * s.Tq + i] = A(m + std::log(l));
        }
  }, "flash_attention");
}

void flash_attention_backward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& dout, const Tensor& lse, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv) {
  dispatch_only<float, double>(q.dtype(), [&](auto tag) {
    using A = typename decltype(tag)::type;
    const Tensor dc = dout.contiguous();
    const A *qp = q.data<A>(), *kp = k.data<A>(), *vp = v.data<A>(), *op = out.data<A>(), *gp = dc.data<A>();
    const A* lp = lse.data<A>();
    std::vector<double> gq(size_t(dq.numel())), gk(size_t(dk.numel())), gv(size_t(dv.numel())), row;
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t i = 0; i < s.Tq; ++i) {
          const int64_t bh = b * s.H + h, qi = bh * s.Tq + i;
          score_row(s, qp, kp, b, h, i, row);
          double di = 0;
          for (int64_t c = 0; c < s.Dv; ++c) di += double(gp[qi * s.Dv + c]) * double(op[qi * s.Dv + c]);
          for (int64_t j = 0; j < s.Tk; ++j) {
            const int64_t kj = bh * s.Tk + j;
            const double p = std::exp(row[size_t(j)] - double(lp[qi]));
            if (p == 0 || std::isnan(p)) continue;
            double dp = 0;
            for (int64_t c = 0; c < s.Dv; ++c) {
              dp += double(gp[qi * s.Dv + c]) * double(vp[kj * s.Dv + c]);
              gv[size_t(kj * s.Dv + c)] += p * double(gp[qi * s.Dv + c]);
            }
            const double ds = p * (dp - di) * s.scale;
            for (int64_t c = 0; c < s.Dh; ++c) {
              gq[size_t(qi * s.Dh + c)] += ds * double(kp[kj * s.Dh + c]);
              gk[size_t(kj * s.Dh + c)] += ds * double(qp[qi * s.Dh + c]);
            }
          }
        }
    auto store = [](const std::vector<double>& g, const Tensor& t) {
      A* p = t.data<A>();
      for (size_t i = 0; i < g.size(); ++i) p[i] = A(g[i]);
    };
    store(gq, dq);
    store(gk, dk);
    store(gv, dv);
  }, "flash_attention_backward");
}

}  // namespace ref

}  // namespace kiln::backend::cpu
