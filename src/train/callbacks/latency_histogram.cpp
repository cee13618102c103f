// LatencyHistogram: log-spaced bins, nearest-rank quantiles, the text form.
#include "kiln/train/callbacks/latency_histogram.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "kiln/core/error.h"

namespace kiln::train {

int64_t LatencyHistogram::bin_of(double seconds) {
  if (!(seconds >= kFloor)) return -1;
  return static_cast<int64_t>(std::floor(std::log(seconds / kFloor) / std::log(kRatio)));
}

double LatencyHistogram::centre_of(int64_t bin) {
  if (bin < 0) return 0.0;
  return kFloor * std::pow(kRatio, static_cast<double>(bin) + 0.5);
}

void LatencyHistogram::add(double seconds) {
  KILN_CHECK(std::isfinite(seconds) && seconds >= 0, "LatencyHistogram", "latency {} s is not a duration >= 0",
             seconds);
  ++bins_[bin_of(seconds)];
  ++count_;
}

void LatencyHistogram::clear() {
  bins_.clear();
  count_ = 0;
}

double LatencyHistogram::quantile(double q) const {
  KILN_CHECK(q > 0 && q <= 1, "LatencyHistogram", "quantile {} must be in (0, 1]", q);
  if (count_ == 0) return std::numeric_limits<double>::quiet_NaN();
  const auto rank = static_cast<int64_t>(std::ceil(q * static_cast<double>(count_)));
  int64_t seen = 0;
  for (const auto& [bin, n] : bins_) {
    seen += n;
    if (seen >= rank) return centre_of(bin);
  }
  return centre_of(bins_.rbegin()->first);
}

std::string LatencyHistogram::str() const {
  std::string s;
  for (const auto& [bin, n] : bins_) s += fmt::format("{}{}:{}", s.empty() ? "" : ",", bin, n);
  return s;
}

LatencyHistogram LatencyHistogram::parse(const std::string& text, const char* op) {
  LatencyHistogram h;
  std::istringstream in(text);
  std::string entry;
  while (std::getline(in, entry, ',')) {
    long long bin = 0, n = 0;
    char colon = 0;
    std::istringstream e(entry);
    const bool ok = static_cast<bool>(e >> bin >> colon >> n) && colon == ':' && e.peek() == EOF && bin >= -1 &&
                    n > 0 && !h.bins_.count(bin);
    KILN_CHECK(ok, op, "latency histogram entry '{}' is not 'bin:count' (bin >= -1, each once, count > 0)", entry);
    h.bins_[bin] = n;
    h.count_ += n;
  }
  return h;
}

}  // namespace kiln::train
