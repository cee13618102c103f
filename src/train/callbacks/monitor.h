// What EarlyStopping, CheckpointCallback and ModelCheckpoint share: reading a
// monitored value from trainer.logs() (the improvement rule is io::improves), the epoch
// number they print and the 4-decimal format of their values.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "kiln/core/error.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/train/trainer.h"

namespace kiln::train::detail {

/// trainer.logs()[monitor], or a kiln::Error naming the monitor and the keys present.
inline double monitored_value(const Trainer& trainer, const std::string& monitor, const char* op) {
  const auto& logs = trainer.logs();
  auto it = logs.find(monitor);
  if (it != logs.end()) return it->second;
  std::string present;
  for (const auto& [key, value] : logs) present += (present.empty() ? "" : ", ") + key;
  KILN_FAIL(op,
            "monitor '{}' is not in trainer.logs() at the end of epoch {} (present: {}); register the callback "
            "that writes it (Validation for \"val/...\") before this one, or monitor one of those",
            monitor, trainer.progress().epoch + 1, present.empty() ? "none" : present);
}

/// The 1-based number of the epoch whose on_epoch_end is running.
inline int64_t epoch_number(const Trainer& trainer) { return trainer.progress().epoch + 1; }

/// Four decimals, as the printed lines show values: 0.3486, inf, nan.
inline std::string format_value(double value) { return fmt::format("{:.4f}", value); }

inline void check_min_delta(double min_delta, const char* op) {
  KILN_CHECK(std::isfinite(min_delta) && min_delta >= 0, op, "min_delta is {}; it must be a finite number >= 0",
             min_delta);
}

}  // namespace kiln::train::detail
