// LatencyHistogram: step latencies in log-spaced bins 1% wide, so Summary can
// print p50/p95 of a run of any length from a small, checkpointable state.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace kiln::train {

class LatencyHistogram {
 public:
  /// One latency in seconds (>= 0; a 0 from a coarse clock counts as 0).
  void add(double seconds);
  int64_t count() const { return count_; }
  void clear();

  /// The q-quantile in seconds (0 < q <= 1) by nearest rank: the
  /// ceil(q * count)-th smallest latency, as its bin's geometric centre, so
  /// within 0.5% of the exact value. NaN when empty.
  double quantile(double q) const;

  /// "bin:count,bin:count,..." (the non-empty bins), for checkpoints; "" when empty.
  std::string str() const;
  /// The inverse of str(); a kiln::Error from `op` names a malformed entry.
  static LatencyHistogram parse(const std::string& text, const char* op);

  bool operator==(const LatencyHistogram&) const = default;

 private:
  // Bin i >= 0 holds [kFloor * kRatio^i, kFloor * kRatio^(i+1)) seconds; bin
  // -1 holds everything below kFloor (1 ns), zero included.
  static constexpr double kFloor = 1e-9;
  static constexpr double kRatio = 1.01;
  static int64_t bin_of(double seconds);
  static double centre_of(int64_t bin);

  std::map<int64_t, int64_t> bins_;  // bin -> count, only the non-empty ones
  int64_t count_ = 0;                // sum of the counts
};

}  // namespace kiln::train
