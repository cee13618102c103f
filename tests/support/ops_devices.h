// Running a test body on every device of the build.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kiln/core/backends.h"
#include "kiln/ops/device.h"

namespace kiln::testing {

/// Runs body once per device this build has (kiln::available_devices(): the
/// CPU, plus each GPU of a build with a GPU backend), with a SCOPED_TRACE
/// naming it. An op test creates its inputs on d (to(x, d), {.device = d}) and
/// checks results moved back with to(y, kCPU) against the same independent
/// reference on every device (STYLE.md: the same test body on every device).
inline void for_each_device(const std::function<void(Device)>& body) {
  for (Device d : available_devices()) {
    SCOPED_TRACE("device " + d.str());
    body(d);
  }
}

}  // namespace kiln::testing
