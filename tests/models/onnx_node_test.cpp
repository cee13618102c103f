// ONNX's own backend conformance tests (Debian's libonnx-testdata: one folder
// per node test, model.onnx + test_data_set_*/{input,output}_N.pb): every test
// whose graph uses only operators kiln runs must reproduce the shipped outputs,
// within ONNX's backend tolerances (rtol 1e-3, atol 1e-7; integers and
// booleans exactly). Tests with a tensor type kiln lacks (FLOAT16, INT8, ...)
// or an attribute kiln refuses at load (3-D pooling, MaxPool's Indices) are
// listed as excluded, each with its reason. Skipped when the data is absent
// ($KILN_ONNX_TESTDATA overrides /usr/share/libonnx-testdata/data/node).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>

#include "kiln/models/onnx_model.h"
#include "tests/support/models_testing.h"

namespace kiln::models {
namespace {
namespace fs = std::filesystem;

std::string testdata_dir() {
  const char* env = std::getenv("KILN_ONNX_TESTDATA");
  return env ? env : "/usr/share/libonnx-testdata/data/node";
}

// "" when `got` matches `want` within ONNX's backend tolerances.
std::string compare(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.dtype() != want.dtype()) return fmt::format("dtype {} != {}", name(got.dtype()), name(want.dtype()));
  if (got.sizes() != want.sizes()) return fmt::format("shape {} != {}", to_string(got.sizes()), to_string(want.sizes()));
  Tensor g = to(got, kF64).contiguous(), w = to(want, kF64).contiguous();
  const double* gp = g.numel() ? g.data<double>() : nullptr;
  const double* wp = w.numel() ? w.data<double>() : nullptr;
  const bool exact = !is_floating(want.dtype());
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double a = gp[i], b = wp[i];
    if (std::isnan(b) && std::isnan(a)) continue;
    if (a == b) continue;
    if (!exact && std::abs(a - b) <= atol + rtol * std::abs(b)) continue;
    return fmt::format("element {}: {} != {}", i, a, b);
  }
  return {};
}

// The reason without the list of supported operators that load errors end with.
std::string reason(const Error& e) {
  std::string w = e.what();
  size_t cut = w.find(". kiln runs:");
  return cut == std::string::npos ? w : w.substr(0, cut);
}

bool is_type_error(const std::string& what) { return what.find("is not supported (kiln reads") != std::string::npos; }

TEST(OnnxNodeTests, EverySupportedOperatorTestMatchesTheShippedOutputs) {
  const std::string root = testdata_dir();
  if (!fs::is_directory(root)) GTEST_SKIP() << root << " is absent (apt-get install libonnx-testdata)";
  if (!io::onnx_supported()) GTEST_SKIP() << "kiln was built without libonnx-dev";
  const std::vector<std::string> supported_list = onnx_supported_ops();
  const std::set<std::string> supported(supported_list.begin(), supported_list.end());

  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "model.onnx")) dirs.push_back(e.path().filename().string());
  std::sort(dirs.begin(), dirs.end());

  std::vector<std::string> passed, failed, excluded;
  int64_t other_ops = 0;
  for (const std::string& name : dirs) {
    const fs::path dir = fs::path(root) / name;
    io::OnnxModelFile file;
    try {
      file = io::read_onnx((dir / "model.onnx").string());
    } catch (const Error& e) {
      // A model kiln cannot read: counted with the others when it uses other
      // operators anyway, excluded (with the reason) when only supported ones.
      excluded.push_back(name + ": " + reason(e));
      continue;
    }
    bool all_supported = true;
    for (const auto& n : file.nodes)
      all_supported = all_supported && (n.domain.empty() || n.domain == "ai.onnx") && supported.count(n.op_type);
    if (!all_supported) {
      ++other_ops;
      continue;
    }
    std::unique_ptr<OnnxModel> model;
    try {
      model = std::make_unique<OnnxModel>(std::move(file));
    } catch (const Error& e) {
      excluded.push_back(name + ": " + reason(e));
      continue;
    }
    bool ok = true, skip = false;
    std::string why;
    for (int set = 0; ok && !skip && fs::exists(dir / fmt::format("test_data_set_{}", set)); ++set) {
      const fs::path data = dir / fmt::format("test_data_set_{}", set);
      try {
        // Inputs by name where the .pb files carry them (optional inputs may be left out), else by position.
        std::vector<std::pair<std::string, Tensor>> given;
        for (int i = 0; fs::exists(data / fmt::format("input_{}.pb", i)); ++i)
          given.push_back(io::read_onnx_tensor((data / fmt::format("input_{}.pb", i)).string()));
        std::vector<Tensor> inputs;
        for (size_t i = 0; i < model->inputs().size(); ++i) {
          const std::string& want = model->inputs()[i].name;
          Tensor t;
          for (const auto& [n, v] : given)
            if (n == want) t = v;
          if (!t.defined() && i < given.size()) t = given[i].second;
          inputs.push_back(t);
        }
        std::vector<Tensor> expected;
        for (int i = 0; fs::exists(data / fmt::format("output_{}.pb", i)); ++i)
          expected.push_back(io::read_onnx_tensor((data / fmt::format("output_{}.pb", i)).string()).second);
        NoGradGuard no_grad;
        std::vector<Tensor> got = model->forward(inputs);
        if (got.size() != expected.size()) {
          ok = false;
          why = fmt::format("{} outputs, expected {}", got.size(), expected.size());
        }
        for (size_t i = 0; ok && i < got.size(); ++i) {
          std::string d = compare(got[i], expected[i], 1e-3, 1e-7);
          if (!d.empty()) {
            ok = false;
            why = fmt::format("output {} ({}): {}", i, model->outputs()[i].name, d);
          }
        }
      } catch (const Error& e) {
        if (is_type_error(e.what())) {
          skip = true;
          why = e.what();
        } else {
          ok = false;
          why = e.what();
        }
      }
    }
    if (skip)
      excluded.push_back(name + ": " + why);
    else if (ok)
      passed.push_back(name);
    else
      failed.push_back(name + ": " + why);
  }
  std::cout << "ONNX node tests in " << root << ": " << dirs.size() << " in all, " << other_ops
            << " use operators kiln does not run; of the rest " << passed.size() << " passed, " << failed.size()
            << " failed, " << excluded.size() << " excluded\n";
  std::cout << "passed:";
  for (const auto& p : passed) std::cout << " " << p;
  std::cout << "\n";
  for (const auto& x : excluded) std::cout << "excluded " << x << "\n";
  for (const auto& f : failed) std::cout << "FAILED " << f << "\n";
  EXPECT_GT(passed.size(), 100u) << "the supported-operator tests were not found";
  EXPECT_TRUE(failed.empty()) << failed.size() << " supported-operator tests failed (listed above)";
}

}  // namespace
}  // namespace kiln::models
