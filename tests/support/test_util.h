// Shared test helpers of every layer's tests, core's own: closeness checks,
// error-message checks, golden files written by tools/gen_goldens.py, scratch
// folders. Only core headers: a layer's tests include the helpers of their
// layer, tests/support/<layer>_testing.h, which add that layer's headers and
// the helpers over ops (golden tensors, gradchecks).
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kiln/core/cpu_info.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"

namespace kiln::testing {

/// Loads tests/goldens/<name>.json.
const nlohmann::json& golden(const std::string& name);
/// A golden array's values: numbers, booleans (0/1), and "nan", "inf", "-inf"
/// (JSON has no NaN or infinity).
std::vector<double> golden_values(const nlohmann::json& data);

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
