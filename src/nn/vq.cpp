// VectorQuantizer: nearest code by one matmul, straight-through, commitment
// loss, EMA codebook with dead-code re-init, highest-norm init (docs/vq.md).
#include "kiln/nn/vq.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/random.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "src/nn/vq_internal.h"

namespace kiln::nn {

namespace vq_detail {

Tensor straight_through(const Tensor& z, const Tensor& zq) {
  // Forward: zq exactly (no z + (zq - z) rounding), backward: the gradient at
  // zq passed to z unchanged. zq is a fresh tensor outside the graph.
  if (needs_grad(z))
    record("vq_straight_through", {z}, {zq}, {}, [](const VjpArgs& a) -> Grads { return {a.grad()}; });
  return zq;
}

Shape leading_shape(const Shape& s) {
  Shape out = s;
  out.erase(out.size() - 1);
  return out;
}

}  // namespace vq_detail

using vq_detail::leading_shape;
using vq_detail::straight_through;

namespace {

// Host loops over the buffers' dtype (f32 or f64).
template <class Fn>
void float_dispatch(DType t, Fn&& fn) {
  if (t == kF32)
    fn(float{});
  else if (t == kF64)
    fn(double{});
  else
    KILN_CHECK(false, "VectorQuantizer", "buffers have dtype {}, expected f32 or f64", name(t));
}

}  // namespace

VectorQuantizer::VectorQuantizer(int64_t K, int64_t D, VectorQuantizerOptions o)
    : codebook_size(K), dim(D), options(o), gen_(o.seed + 0x9E3779B97F4A7C15ull) {
  KILN_CHECK(K > 0 && D > 0, "VectorQuantizer", "codebook_size {} and dim {} must be positive", K, D);
  KILN_CHECK(o.beta >= 0 && std::isfinite(o.beta), "VectorQuantizer", "beta must be finite and >= 0, got {}", o.beta);
  KILN_CHECK(o.decay >= 0 && o.decay < 1, "VectorQuantizer", "decay must be in [0, 1), got {}", o.decay);
  KILN_CHECK(o.eps > 0 && std::isfinite(o.eps), "VectorQuantizer", "eps must be positive, got {}", o.eps);
  KILN_CHECK(o.dead_code_threshold >= 0 && o.dead_code_threshold < 1, "VectorQuantizer",
             "dead_code_threshold is a share of the tokens in [0, 1), got {}", o.dead_code_threshold);
  Generator init(o.seed);
  Tensor cb = randn({K, D}, init);
  codebook = register_buffer("codebook", cb);
  cluster_size = register_buffer("cluster_size", ones({K}));
  embed_sum = register_buffer("embed_sum", cb.clone());
  initialized = register_buffer("initialized", zeros({}, {.dtype = kI64}));
}

Tensor VectorQuantizer::flat(const char* what, const Tensor& z) const {
  KILN_CHECK(z.defined(), what, "input is undefined");
  KILN_CHECK(z.dim() >= 1 && z.shape().back() == dim, what, "input {} must end in dim {} (codebook [{}, {}])",
             describe(z), dim, codebook_size, dim);
  KILN_CHECK(z.dtype() == codebook.dtype(), what, "input {} must have the codebook's dtype {}", describe(z),
             name(codebook.dtype()));
  return z.reshape({z.numel() / dim, dim});
}

void VectorQuantizer::check_indices(const char* what, const Tensor& indices) const {
  KILN_CHECK(indices.defined(), what, "indices are undefined");
  KILN_CHECK(indices.dtype() == kI64 || indices.dtype() == kI32, what, "indices {} must be i64 or i32",
             describe(indices));
  if (indices.numel() == 0) return;
  const int64_t lo = min(indices).item<int64_t>(), hi = max(indices).item<int64_t>();
  KILN_CHECK(lo >= 0 && hi < codebook_size, what, "indices {} hold values in [{}, {}], outside [0, {}) (codebook_size)",
             describe(indices), lo, hi, codebook_size);
}

Tensor VectorQuantizer::encode(const Tensor& z) const {
  Tensor zf = flat("VectorQuantizer.encode", z);
  NoGradGuard no_grad;
  return vq_detail::nearest(codebook, zf.detach()).reshape(leading_shape(z.shape()));
}

namespace vq_detail {

Tensor nearest(const Tensor& codebook, const Tensor& zf) {
  // ||z - c||^2 = ||z||^2 - 2 z.c + ||c||^2; ||z||^2 is the same for every
  // code of a row, so argmin over ||c||^2 - 2 z.c: one [N, D] x [D, K] matmul.
  // The -2 goes into the [K, D] codebook (exact: a power of two) so that
  // ||c||^2 enters as the product's bias row: with alpha -2 addmm would first
  // copy the broadcast [N, K] input into the output (6.4 MB at N 6272, K 256).
  Tensor c_sq = sum(square(codebook), {1});             // [K]
  Tensor d = addmm(c_sq, zf, mul(codebook, -2.0).t());  // [N, K]
  return argmin(d, 1).to(kI64);                                   // [N]
}

}  // namespace vq_detail

Tensor VectorQuantizer::lookup(const Tensor& indices) const {
  check_indices("VectorQuantizer.lookup", indices);
  NoGradGuard no_grad;
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  return index_select(codebook, 0, indices.reshape({indices.numel()})).reshape(out_shape);
}

VQOutput VectorQuantizer::forward(const Tensor& z) const {
  Tensor zf = flat("VectorQuantizer", z);
  Tensor idx, zq;
  {
    NoGradGuard no_grad;
    Tensor zd = zf.detach();
    if (is_training() && options.highest_norm_init && initialized.item<int64_t>() == 0)
      vq_detail::seed_highest_norm(*this, zd);
    idx = vq_detail::nearest(codebook, zd);
    zq = index_select(codebook, 0, idx);  // [N, D], a fresh tensor
  }
  VQOutput out;
  // sg(z_q): an alias cut from the graph, taken before zq gets its node.
  Tensor zq_sg = zq.detach();
  out.commitment_loss = mul(mean(square(sub(zf, zq_sg))), options.beta);
  out.quantized = straight_through(zf, zq).reshape(z.shape());
  out.indices = idx.reshape(leading_shape(z.shape()));
  return out;
}

namespace vq_detail {

void seed_highest_norm(const VectorQuantizer& vq, const Tensor& latents) {
  const int64_t K = vq.codebook_size, D = vq.dim, M = latents.size(0);
  KILN_CHECK(M >= K, "VectorQuantizer.init_from", "latents {} have fewer rows than codebook_size {}",
             describe(latents), K);
  Tensor x = latents.contiguous();
  Tensor cb = empty({K, D}, {.dtype = x.dtype()});
  float_dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    std::vector<double> norm(size_t(M), 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < D; ++j) norm[size_t(i)] += double(p[i * D + j]) * double(p[i * D + j]);
    std::vector<int64_t> order(static_cast<size_t>(M));
    std::iota(order.begin(), order.end(), 0);
    // Stable: equal norms keep row order, so ties go to the lower row.
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return norm[size_t(a)] > norm[size_t(b)]; });
    T* c = cb.data<T>();
    for (int64_t k = 0; k < K; ++k) std::copy_n(p + order[size_t(k)] * D, D, c + k * D);
  });
  copy_(vq.codebook, cb);
  copy_(vq.embed_sum, cb);
  fill_(vq.cluster_size, 1);
  fill_(vq.initialized, 1);
}

}  // namespace vq_detail

void VectorQuantizer::init_from(const Tensor& latents) {
  KILN_CHECK(latents.defined() && latents.dim() == 2 && latents.size(1) == dim, "VectorQuantizer.init_from",
             "latents {} must be [M, {}] with M >= codebook_size {}", describe(latents), dim, codebook_size);
  KILN_CHECK(latents.dtype() == codebook.dtype(), "VectorQuantizer.init_from", "latents {} must have dtype {}",
             describe(latents), name(codebook.dtype()));
  NoGradGuard no_grad;
  vq_detail::seed_highest_norm(*this, latents.detach());
}

void VectorQuantizer::ema_update(const Tensor& z, const Tensor& indices) {
  const char* op = "VectorQuantizer.ema_update";
  KILN_CHECK(is_training(), op, "called in eval mode: the codebook only learns in train mode");
  Tensor zf = flat(op, z);
  check_indices(op, indices);
  KILN_CHECK(indices.shape() == leading_shape(z.shape()), op, "indices {} must have the shape of z {} without its last dim",
             describe(indices), describe(z));
  KILN_CHECK(zf.size(0) > 0, op, "z {} holds no rows", describe(z));
  NoGradGuard no_grad;
  vq_detail::ema_step(*this, zf.detach(), indices.reshape({indices.numel()}).to(kI64));
}

namespace vq_detail {

void ema_step(VectorQuantizer& vq, const Tensor& zf, const Tensor& idx) {
  const int64_t K = vq.codebook_size, D = vq.dim, N = zf.size(0);
  const auto& o = vq.options;
  const DType dt = vq.codebook.dtype();
  Tensor counts = index_add(zeros({K}, {.dtype = dt}), 0, idx, ones({N}, {.dtype = dt}));  // n_k
  Tensor sums = index_add(zeros({K, D}, {.dtype = dt}), 0, idx, zf);                      // s_k
  Tensor cs = add(mul(vq.cluster_size, o.decay), mul(counts, 1 - o.decay)).contiguous();
  Tensor es = add(mul(vq.embed_sum, o.decay), mul(sums, 1 - o.decay)).contiguous();
  Tensor total = sum(cs);  // T
  // Laplace smoothing: no cluster size reaches 0, the total is unchanged.
  Tensor smoothed = mul(div(add(cs, o.eps), add(total, double(K) * o.eps)), total);
  Tensor cb = div(es, smoothed.unsqueeze(1)).contiguous();

  if (o.dead_code_threshold > 0) {
    std::vector<int64_t> dead;
    double T = 0;
    float_dispatch(dt, [&](auto tag) {
      using V = decltype(tag);
      const V* c = cs.data<V>();
      T = double(total.item<V>());
      for (int64_t k = 0; k < K; ++k)
        if (double(c[k]) < o.dead_code_threshold * T) dead.push_back(k);
    });
    if (!dead.empty()) {
      // Rows of this batch, without repeats while the batch has enough.
      const int64_t n = int64_t(dead.size());
      Tensor rows = n <= N ? randperm(N, vq.gen_).narrow(0, 0, n) : randint(0, N, {n}, vq.gen_);
      std::vector<int64_t> r = rows.to(kI64).to_vector<int64_t>();
      Tensor x = zf.contiguous();
      float_dispatch(dt, [&](auto tag) {
        using V = decltype(tag);
        const V* zp = x.data<V>();
        V* c = cs.data<V>();
        V* e = es.data<V>();
        V* b = cb.data<V>();
        const V share = V(T / double(K));
        // The code is the row itself, and the statistics say so: a cluster of
        // T / K tokens averaging that row. The next update starts from there
        // instead of pulling the code back to its stale sum (encodec #61).
        for (int64_t i = 0; i < n; ++i) {
          const int64_t k = dead[size_t(i)];
          const V* row = zp + r[size_t(i)] * D;
          c[k] = share;
          for (int64_t j = 0; j < D; ++j) {
            b[k * D + j] = row[j];
            e[k * D + j] = row[j] * share;
          }
        }
      });
    }
  }
  copy_(vq.cluster_size, cs);
  copy_(vq.embed_sum, es);
  copy_(vq.codebook, cb);
  fill_(vq.initialized, 1);
}

}  // namespace vq_detail

VQStats VectorQuantizer::stats(const Tensor& indices) const {
  check_indices("VectorQuantizer.stats", indices);
  VQStats s;
  std::vector<int64_t> hist(size_t(codebook_size), 0);
  for (int64_t i : indices.to(kI64).to_vector<int64_t>()) ++hist[size_t(i)];
  const double n = double(indices.numel());
  double entropy = 0;
  for (int64_t h : hist) {
    if (h == 0) continue;
    ++s.used;
    const double p = double(h) / n;
    entropy -= p * std::log(p);
  }
  s.usage = double(s.used) / double(codebook_size);
  s.perplexity = indices.numel() > 0 ? std::exp(entropy) : 0.0;
  if (options.dead_code_threshold > 0) {
    std::vector<double> cs = cluster_size.to_vector<double>();
    const double T = std::accumulate(cs.begin(), cs.end(), 0.0);
    for (double c : cs) s.dead += c < options.dead_code_threshold * T ? 1 : 0;
  }
  return s;
}

std::string VectorQuantizer::extra_repr() const {
  return fmt::format("codebook_size={}, dim={}, beta={}, decay={}, dead_code_threshold={}", codebook_size, dim,
                     options.beta, options.decay, options.dead_code_threshold);
}

}  // namespace kiln::nn
