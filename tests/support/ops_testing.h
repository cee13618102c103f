// What a test of the ops uses: test_util.h, the core and ops headers, and the
// helpers over ops: golden tensors, non-contiguous copies, f64 leaves and the
// gradchecks. A vjp is checked by running it, so the ops' tests are the one
// place below autograd that sees the engine (tools/check_layers.py,
// TEST_EDGES; docs/architecture.md, Layers).
#pragma once

#include <functional>
#include <vector>

#include "kiln/autograd/engine.h"
#include "kiln/autograd/functional.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/core/allocator.h"
#include "kiln/core/generator.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/core/rngs.h"
#include "kiln/ops/attention.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/dropout.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/pool.h"
#include "kiln/ops/promotion.h"
#include "kiln/ops/random.h"
#include "kiln/ops/record.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/resize.h"
#include "kiln/ops/rnn.h"
#include "kiln/ops/rotary.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "tests/support/test_util.h"

namespace kiln::testing {

/// A function of a test's inputs, as gradcheck takes it.
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

/// A golden tensor: {"shape": [...], "dtype": "f32", "data": [...]} (data
/// row-major; NaN/inf written as strings "nan", "inf", "-inf").
Tensor golden_tensor(const nlohmann::json& j);

/// The same values in a non-contiguous layout (a transposed copy viewed back).
Tensor noncontiguous(const Tensor& x);
/// Random f64 leaf with requires_grad for gradchecks, values in [lo, hi).
Tensor leaf(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0);
/// A leaf with requires_grad holding x's values (a contiguous copy, no history).
Tensor leaf_of(const Tensor& x);
/// Standard-normal values drawn in f64 from Generator(seed), then cast to dtype:
/// the same values, rounded, whatever the dtype.
Tensor randn_seeded(const Shape& shape, uint64_t seed, DType dtype = kF64);

/// Second order: gradcheck of x -> sum_i sum(g_i^2), g = d sum(fn(x)^3) / dx
/// computed with create_graph, so every vjp's own vjp is checked.
inline GradcheckResult gradcheck_second_order(const Fn& fn, const std::vector<Tensor>& inputs) {
  TensorFn outer = [fn](const std::vector<Tensor>& in) {
    std::vector<Tensor> g = kiln::grad([fn](const std::vector<Tensor>& xs) { return sum(pow(fn(xs), 3)); }, in);
    Tensor total = sum(g[0] * g[0]);
    for (size_t i = 1; i < g.size(); ++i) total = total + sum(g[i] * g[i]);
    return total;
  };
  return gradcheck(outer, inputs);
}

}  // namespace kiln::testing

/// EXPECT_GRADCHECK(fn, inputs[, opts]).
#define EXPECT_GRADCHECK(...)                                  \
  do {                                                         \
    auto kiln_gc_result = ::kiln::gradcheck(__VA_ARGS__);      \
    EXPECT_TRUE(kiln_gc_result.ok) << kiln_gc_result.message;  \
  } while (0)
