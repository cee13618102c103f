// Shared test helpers: closeness checks, error-message checks, golden files
// written by tools/gen_goldens.py, and non-contiguous copies of inputs.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::testing {

/// A function of a test's inputs, as gradcheck takes it.
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Loads tests/goldens/<name>.json.
const nlohmann::json& golden(const std::string& name);
/// A golden tensor: {"shape": [...], "dtype": "f32", "data": [...]} (data
/// row-major; NaN/inf written as strings "nan", "inf", "-inf").
Tensor golden_tensor(const nlohmann::json& j);

/// Elementwise |a - b| <= atol + rtol * |b| with equal shapes; NaNs must match.
::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-6);
/// Exact equality of shape, dtype and values.
::testing::AssertionResult equal(const Tensor& a, const Tensor& b);

/// A whole file's bytes ("" when it cannot be read), and writing them back.
std::string read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::string& bytes);
/// A text file's lines, without their '\n' (empty when it cannot be read).
std::vector<std::string> read_lines(const std::string& path);
/// This build tree's scratch folder under gtest's TempDir()
/// ("kiln_tests-<hash of the test binary's folder>"): the suites of two
/// builds can run at the same time.
std::filesystem::path scratch_root();
/// A fresh, empty folder for the running test under scratch_root(), named
/// after its suite and name (plus `suffix`); an earlier run's files are removed.
std::string fresh_dir(const std::string& suffix = "");

/// A module's state-dict keys in order (to compare with PyTorch's layout).
inline std::vector<std::string> state_dict_keys(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m.state_dict()) out.push_back(k);
  return out;
}

/// Runs body once per kernel ISA this build and CPU can run (avx2 always,
/// avx512 where available: NOTE [Per-ISA kernels] in CMakeLists.txt), with
/// that ISA selected and a SCOPED_TRACE naming it; the previous choice is
/// restored afterwards. Kernel tests use it so that an AVX-512 machine checks
/// both copies of each per-ISA kernel.
inline void for_each_kernel_isa(const std::function<void(KernelIsa)>& body) {
  const KernelIsa saved = cpu_info().kernel_isa;
  std::vector<KernelIsa> isas{KernelIsa::avx2};
  try {
    detail::set_kernel_isa(KernelIsa::avx512);
    isas.push_back(KernelIsa::avx512);
  } catch (const Error&) {  // no AVX-512 here: the AVX2 copy is the only one
  }
  for (KernelIsa isa : isas) {
    SCOPED_TRACE(std::string("kernel isa ") + name(isa));
    detail::set_kernel_isa(isa);
    body(isa);
  }
  detail::set_kernel_isa(saved);
}

/// The same values in a non-contiguous layout (a transposed copy viewed back).
Tensor noncontiguous(const Tensor& x);
/// Random f64 leaf with requires_grad for gradchecks, values in [lo, hi).
Tensor leaf(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0);

/// Second order: gradcheck of x -> sum_i sum(g_i^2), g = d sum(fn(x)^3) / dx
/// computed with create_graph, so every vjp's own vjp is checked.
/// (inline: the core tests link no autograd.)
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

/// EXPECT_KILN_ERROR(stmt, "substring"): stmt throws kiln::Error whose what()
/// contains substring.
#define EXPECT_KILN_ERROR(stmt, substring)                                                  \
  do {                                                                                      \
    try {                                                                                   \
      stmt;                                                                                 \
      ADD_FAILURE() << "expected kiln::Error containing \"" << (substring) << "\"";        \
    } catch (const ::kiln::Error& e) {                                                      \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)                   \
          << "message: " << e.what() << "\nexpected to contain: " << (substring);           \
    }                                                                                       \
  } while (0)

/// EXPECT_GRADCHECK(fn, inputs[, opts]).
#define EXPECT_GRADCHECK(...)                                  \
  do {                                                         \
    auto kiln_gc_result = ::kiln::gradcheck(__VA_ARGS__);      \
    EXPECT_TRUE(kiln_gc_result.ok) << kiln_gc_result.message;  \
  } while (0)
