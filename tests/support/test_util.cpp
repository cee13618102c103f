// Shared test helpers of every layer's tests (tests/support/test_util.h).
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

}  // namespace

std::vector<double> golden_values(const nlohmann::json& data) {
  std::vector<double> out;
  for (const auto& v : data) out.push_back(json_number(v));
  return out;
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

}  // namespace kiln::testing
