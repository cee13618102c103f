// kiln::Error and KILN_CHECK: every failure names its op, e.g.
// "[linear] input [32, 780] does not match weight [256, 784] (in_features 784)".
#pragma once

#include <fmt/core.h>

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  /// what() is "[op] message"; file and line say where the check sits.
  Error(std::string_view op, const std::string& message, const char* file = "", int line = 0);

  const std::string& op() const { return op_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string op_;
  const char* file_;
  int line_;
};

}  // namespace kiln

/// KILN_CHECK(cond, "op", "fmt {}", args...): throws kiln::Error("[op] ...")
/// when cond is false. Arguments are only formatted on failure.
#define KILN_CHECK(cond, op, ...)                                                  \
  do {                                                                             \
    if (!(cond)) [[unlikely]]                                                      \
      throw ::kiln::Error((op), ::fmt::format(__VA_ARGS__), __FILE__, __LINE__);   \
  } while (0)

/// Unconditional failure with the same format.
#define KILN_FAIL(op, ...) throw ::kiln::Error((op), ::fmt::format(__VA_ARGS__), __FILE__, __LINE__)
