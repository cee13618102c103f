// Bounded numeric flags for the kiln command line (docs/reliability.md,
// "CLI input"). CLI11's own conversions wrap (--seed -1 became 2^64 - 1),
// truncate (--epochs 1e20 became a negative step count) and print double's
// whole range on a typo; these read the text themselves and refuse anything
// outside [lo, hi] in one line that names the flag, the range and the value:
//
//   kiln: error: --epochs must be a whole number in [1, 1000000], got 'abc'
//
//   add_integer(sub, "--epochs", o.epochs, "epochs", 1, 1'000'000);
//   add_real(sub, "--lr", o.lr, "learning rate", {.lo = 0, .lo_open = true});
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <string>

namespace kiln::app {

/// A whole number in [lo, hi]: digits ("64"), or an exact whole number in
/// decimal or scientific form ("1e9", "100.0"). Throws CLI::ValidationError.
long double parse_whole(const std::string& flag, const std::string& text, long double lo, long double hi);

/// The range of a real flag; an open end excludes its bound. Always finite.
struct RealRange {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
};

/// A finite number in the range ("nan" and "inf" are refused). Throws CLI::ValidationError.
double parse_real(const std::string& flag, const std::string& text, RealRange range);

/// An option of integer type T read by parse_whole; the help shows the
/// current value as the default unless `show_default` is false.
template <class T>
CLI::Option* add_integer(CLI::App* app, const std::string& flag, T& value, const std::string& help, long double lo,
                         long double hi, bool show_default = true) {
  CLI::Option* opt = app->add_option_function<std::string>(
      flag, [&value, flag, lo, hi](const std::string& text) { value = T(parse_whole(flag, text, lo, hi)); }, help);
  opt->type_name("INT");
  if (show_default) opt->default_str(std::to_string(value));
  return opt;
}

/// An option of type double read by parse_real.
CLI::Option* add_real(CLI::App* app, const std::string& flag, double& value, const std::string& help, RealRange range,
                      bool show_default = true);

/// Largest values some flags take: beyond them a run could not fit in memory
/// or time, and the arithmetic on them (steps x batch) would overflow int64.
inline constexpr long double kMaxCount = 1e12;           // steps, iterations
inline constexpr long double kMaxBatch = 2147483647.0;   // 2^31 - 1 rows
inline constexpr long double kMaxSeed = 18446744073709551615.0L;  // 2^64 - 1
inline constexpr long double kMaxThreads = 1 << 20;      // clamped to the CPUs later

}  // namespace kiln::app
