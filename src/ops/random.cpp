// Random tensors: argument checks, generator bookkeeping (each draw reserves
// its Philox blocks up front, so the generator's offset says exactly what was
// consumed), and the in-place fills. Kernels: src/backend/cpu/random/random.cpp.
#include "kiln/ops/random.h"

#include <cmath>
#include <limits>

#include "kiln/core/backends.h"
#include "kiln/core/replay.h"
#include "kiln/core/size_check.h"
#include "kiln/ops/record.h"
#include "kiln/ops/shape.h"
#include "src/backend/cpu/copy/copy.h"
#include "src/backend/cpu/random/random.h"

namespace kiln {

namespace {

void check_shape(const char* op, const Shape& shape) { checked_numel(op, shape); }

void check_floating(const char* op, DType dtype) {
  KILN_CHECK(is_floating(dtype), op, "dtype {} is not a floating-point type (use f32, f64 or bf16)", name(dtype));
}

// Reserves `blocks` Philox blocks of gen and runs draw(seed, first_block).
// Recorded (NOTE [Recorded launches]) as a launch that reserves its blocks
// from the live generator at replay, so each replay draws fresh numbers and
// leaves gen where eager would; a generator the recorder does not know (a
// temporary, which a replay could not reach) rejects the recording.
template <class Draw>
void random_launch(const char* op, Generator& gen, uint64_t blocks, Draw draw) {
  if (replay::Recorder* rec = replay::active()) [[unlikely]] {
    if (rec->allows(gen)) {
      Generator* g = &gen;
      replay::launch(op, [g, blocks, draw] {
        const uint64_t first = g->advance(blocks);
        draw(g->seed(), first);
      });
      return;
    }
    replay::reject("ReplaySafety", op,
                   std::string("op '") + op +
                       "' draws from a generator the compiled step was not given (a temporary, e.g. from "
                       "Rngs::next); a replay could not advance it");
  }
  const uint64_t first = gen.advance(blocks);
  draw(gen.seed(), first);
}

Tensor finish(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

// Checks an in-place fill of x and returns the tensor to generate into: x
// itself when contiguous, else a contiguous scratch copied back by commit().
Tensor fill_target(const char* op, const Tensor& x) {
  KILN_CHECK(x.defined(), op, "undefined tensor");
  check_device(op, x.device());
  check_floating(op, x.dtype());
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(x.stride(d) != 0 || x.size(d) <= 1, op,
               "tensor of shape {} with strides {} has elements sharing memory (expanded); clone() it first",
               to_string(x.shape()), to_string(x.strides()));
  check_inplace(op, x);
  return x.is_contiguous() ? x : Tensor::empty(x.shape(), x.dtype(), x.device());
}

// Writes the scratch back, bumps the version and, when x is in the graph,
// records that its old value no longer matters (zero gradient).
void commit(const char* op, const Tensor& x, const Tensor& target) {
  if (!target.is_same(x)) KILN_LAUNCH(op, backend::cpu::copy(target, x));
  x.storage()->bump_version();
  if (needs_grad(x))
    record(op, {x}, {x}, {}, [](const VjpArgs& a) -> Grads { return {zeros_like(a.grad())}; });
}

// The integer range [lo, hi] a dtype holds exactly.
std::pair<double, double> integer_limits(DType dtype) {
  return dispatch(dtype, [](auto tag) -> std::pair<double, double> {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>)
      return {double(std::numeric_limits<T>::min()), double(std::numeric_limits<T>::max())};
    else return {-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  });
}

}  // namespace

Tensor rand(const Shape& shape, Generator& gen, TensorOptions opts) {
  check_shape("rand", shape);
  check_floating("rand", opts.dtype);
  Tensor out = empty_for("rand", shape, opts.dtype, opts.device);
  random_launch("rand", gen, backend::cpu::blocks_for(backend::cpu::uniform_words(opts.dtype, out.numel())),
                [out](uint64_t seed, uint64_t first) { backend::cpu::uniform(out, 0.0, 1.0, seed, first); });
  return finish(out, opts);
}

Tensor randn(const Shape& shape, Generator& gen, TensorOptions opts) {
  check_shape("randn", shape);
  check_floating("randn", opts.dtype);
  Tensor out = empty_for("randn", shape, opts.dtype, opts.device);
  random_launch("randn", gen, backend::cpu::blocks_for(backend::cpu::normal_words(opts.dtype, out.numel())),
                [out](uint64_t seed, uint64_t first) { backend::cpu::normal(out, 0.0, 1.0, seed, first); });
  return finish(out, opts);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, TensorOptions opts) {
  check_shape("randint", shape);
  KILN_CHECK(low < high, "randint", "low {} must be less than high {}", low, high);
  KILN_CHECK(opts.dtype != kBool, "randint", "dtype bool is not supported; use bernoulli");
  auto [lo, hi] = integer_limits(opts.dtype);
  KILN_CHECK(double(low) >= lo && double(high - 1) <= hi, "randint",
             "range [{}, {}) does not fit dtype {} ([{}, {}])", low, high, name(opts.dtype), lo, hi);
  Tensor out = empty_for("randint", shape, opts.dtype, opts.device);
  uint64_t range = uint64_t(high) - uint64_t(low);
  random_launch("randint", gen, backend::cpu::blocks_for(backend::cpu::randint_words(range, out.numel())),
                [out, low, range](uint64_t seed, uint64_t first) { backend::cpu::randint(out, low, range, seed, first); });
  return finish(out, opts);
}

Tensor bernoulli(const Tensor& p, Generator& gen) {
  KILN_CHECK(p.defined(), "bernoulli", "p is undefined");
  check_device("bernoulli", p.device());
  KILN_CHECK(is_floating(p.dtype()), "bernoulli",
             "p of shape {} has dtype {}; expected a floating-point tensor of probabilities", to_string(p.shape()),
             name(p.dtype()));
  Tensor probs;
  {
    NoGradGuard no_grad;  // reading p: not part of any graph
    probs = contiguous(p);
  }
  Tensor out = Tensor::empty(p.shape(), p.dtype(), p.device());
  const GeneratorState before = gen.state();
  uint64_t first = gen.advance(backend::cpu::blocks_for(out.numel()));
  if (!backend::cpu::bernoulli(out, probs, gen.seed(), first)) {
    gen.set_state(before);  // a failed call consumes nothing
    KILN_FAIL("bernoulli", "p of shape {} holds values outside [0, 1] (or NaN)", to_string(p.shape()));
  }
  return out;
}

Tensor bernoulli(const Shape& shape, double p, Generator& gen, TensorOptions opts) {
  check_shape("bernoulli", shape);
  KILN_CHECK(p >= 0.0 && p <= 1.0, "bernoulli", "p must be in [0, 1], got {}", p);
  Tensor out = empty_for("bernoulli", shape, opts.dtype, opts.device);
  random_launch("bernoulli", gen, backend::cpu::blocks_for(out.numel()),
                [out, p](uint64_t seed, uint64_t first) { backend::cpu::bernoulli(out, p, seed, first); });
  return finish(out, opts);
}

Tensor randperm(int64_t n, Generator& gen) {
  KILN_CHECK(n >= 0, "randperm", "n must be non-negative, got {}", n);
  Tensor out = empty_for("randperm", {n}, kI64);
  uint64_t first = gen.advance(backend::cpu::blocks_for(backend::cpu::randperm_words(n)));
  backend::cpu::randperm(out, gen.seed(), first);
  return out;
}

Tensor uniform_(const Tensor& x, double low, double high, Generator& gen) {
  KILN_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, "uniform_",
             "expects finite low <= high, got low {} and high {}", low, high);
  Tensor target = fill_target("uniform_", x);
  random_launch("uniform_", gen, backend::cpu::blocks_for(backend::cpu::uniform_words(x.dtype(), x.numel())),
                [target, low, high](uint64_t seed, uint64_t first) { backend::cpu::uniform(target, low, high, seed, first); });
  commit("uniform_", x, target);
  return x;
}

Tensor normal_(const Tensor& x, double mean, double std, Generator& gen) {
  KILN_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0.0, "normal_",
             "expects a finite mean and a finite std >= 0, got mean {} and std {}", mean, std);
  Tensor target = fill_target("normal_", x);
  random_launch("normal_", gen, backend::cpu::blocks_for(backend::cpu::normal_words(x.dtype(), x.numel())),
                [target, mean, std](uint64_t seed, uint64_t first) { backend::cpu::normal(target, mean, std, seed, first); });
  commit("normal_", x, target);
  return x;
}

}  // namespace kiln
