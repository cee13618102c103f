#include "kiln/nn/upsample.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/core/error.h"

namespace kiln::nn {

Upsample::Upsample(InterpolateOptions opts) : options(std::move(opts)) {
  KILN_CHECK(options.size.empty() != options.scale_factor.empty(), "Upsample",
             "give exactly one of size and scale_factor (got size {} and scale_factor {})", options.size,
             options.scale_factor);
}

std::string Upsample::extra_repr() const {
  static const char* const modes[] = {"nearest", "linear", "bilinear"};
  std::string what = options.size.empty() ? fmt::format("scale_factor={}", options.scale_factor)
                                          : fmt::format("size={}", options.size);
  return fmt::format("{}, mode='{}'{}", what, modes[int(options.mode)],
                     options.align_corners ? ", align_corners=true" : "");
}

}  // namespace kiln::nn
