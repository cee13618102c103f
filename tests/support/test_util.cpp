// Shared test helpers.
#include "tests/support/test_util.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

namespace kiln::testing {

const nlohmann::json& golden(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, nlohmann::json> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  std::string path = std::string(KILN_GOLDEN_DIR) + "/" + name + ".json";
  std::ifstream f(path);
  KILN_CHECK(f.good(), "golden", "cannot open {} (run tools/gen_goldens.py)", path);
  return cache[name] = nlohmann::json::parse(f);
}

namespace {
double json_number(const nlohmann::json& v) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  return v.get<double>();
}

DType dtype_from_name(const std::string& s) {
  for (DType t : {kBool, kU8, kI32, kI64, kBF16, kF32, kF64})
    if (name(t) == s) return t;
  KILN_FAIL("golden", "unknown dtype '{}'", s);
}
}  // namespace

Tensor golden_tensor(const nlohmann::json& j) {
  Shape shape(j.at("shape").get<std::vector<int64_t>>());
  std::vector<double> data;
  for (const auto& v : j.at("data")) data.push_back(json_number(v));
  Tensor t = tensor(data, shape);
  return to(t, dtype_from_name(j.at("dtype").get<std::string>()));
}

::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (!a.defined() || !b.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shapes differ: " << to_string(a.shape()) << " vs " << to_string(b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    bool both_nan = std::isnan(x[i]) && std::isnan(y[i]);
    bool same_inf = std::isinf(x[i]) && x[i] == y[i];
    if (both_nan || same_inf) continue;
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i] << " (shape "
                                           << to_string(a.shape()) << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "dtypes differ: " << name(a.dtype()) << " vs " << name(b.dtype());
  return all_close(a, b, 0.0, 0.0);
}

// One scratch root per build tree ("kiln_tests-<hash of the test binary's
// folder>"), so that the suites of two builds (Release and ASan) can run at
// the same time without sharing a test's folder.
std::filesystem::path scratch_root() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return std::filesystem::path(::testing::TempDir()) / "kiln_tests";
  return std::filesystem::path(::testing::TempDir()) /
         fmt::format("kiln_tests-{:08x}", std::hash<std::string>{}(exe.parent_path().string()) & 0xffffffffu);
}

std::string fresh_dir(const std::string& suffix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  static const std::filesystem::path root = scratch_root();
  std::filesystem::path dir = root / (std::string(info->test_suite_name()) + "." + info->name() + suffix);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

Tensor noncontiguous(const Tensor& x) {
  if (x.dim() == 0) return x;
  // Store with the last dim outermost, then view back: same values, strides permuted.
  Shape perm;
  perm.push_back(x.dim() - 1);
  for (int64_t d = 0; d + 1 < x.dim(); ++d) perm.push_back(d);
  Shape inv;
  for (int64_t d = 1; d < x.dim(); ++d) inv.push_back(d);
  inv.push_back(0);
  Tensor stored;
  {
    NoGradGuard g;
    stored = contiguous(permute(x, perm));
  }
  Tensor out = permute(stored, inv);
  if (x.requires_grad() && x.is_leaf()) {
    // A leaf with the same values and a non-contiguous layout.
    out = out.detach();
    out.requires_grad_(true);
  }
  return out;
}

Tensor leaf(const Shape& shape, uint64_t seed, double lo, double hi) {
  Generator gen(seed);
  Tensor t = rand(shape, gen, {.dtype = kF64});
  Tensor out;
  {
    NoGradGuard g;
    out = add(mul(t, hi - lo), lo);
  }
  out.requires_grad_(true);
  return out;
}

}  // namespace kiln::testing
