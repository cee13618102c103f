// Shared pieces of the Trainer-based jobs (apps/kiln/job_support.h).
#include "apps/kiln/job_support.h"

#include <fmt/format.h>

#include "kiln/core/cpu_info.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"

namespace kiln::app {

std::string threads_and_cpu() {
  const int n = get_num_threads();
  return fmt::format("{} thread{} · {}", n, n == 1 ? "" : "s", cpu_info().summary());
}

train::OnNan parse_on_nan(const std::string& op, const std::string& value) {
  if (value == "stop") return train::OnNan::stop;
  if (value == "skip") return train::OnNan::skip;
  KILN_FAIL(op, "--on-nan must be stop or skip, got '{}'", value);
}

void fail_on_nan(const std::string& op, const train::NonFiniteLoss& e, const std::string& last_checkpoint) {
  KILN_FAIL(op,
            "non-finite {} at step {} (epoch {}): training stopped there, and no checkpoint of it was written; the "
            "last good checkpoint is {} (--on-nan skip skips such steps instead; a lower --lr may avoid them)",
            e.what_was_not_finite(), e.step(), e.epoch() + 1,
            last_checkpoint.empty() ? std::string("none (the run had not saved one yet)") : last_checkpoint);
}

}  // namespace kiln::app
