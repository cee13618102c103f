// Benches for resizing and rotary embedding (bench/run): forward + backward per
// iteration in f32, the same shapes as bench/torch_resize.py.
//   upsample_nearest_x2     x [32, 64, 32, 32] -> [32, 64, 64, 64], nearest
//   upsample_bilinear_x2    the same, bilinear (align_corners false)
//   rotary_b8h8t256d64      x [8, 8, 256, 64], half-split RoPE, positions 0..255
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

void bench_upsample(const std::string& name, kiln::InterpolateMode mode) {
  kiln::Generator gen(0);
  kiln::Tensor x = kiln::randn({32, 64, 32, 32}, gen).requires_grad_(), g = kiln::randn({32, 64, 64, 64}, gen);
  double sec = seconds_per_call(
      [&] {
        kiln::interpolate(x, {.scale_factor = {2}, .mode = mode}).backward(g);
        x.set_grad({});
      },
      0.2);
  emit(name, "time", "ms/iter", sec * 1e3);
}

void bench_rotary(const std::string& name) {
  kiln::Generator gen(1);
  kiln::Tensor x = kiln::randn({8, 8, 256, 64}, gen).requires_grad_(), g = kiln::randn({8, 8, 256, 64}, gen);
  double sec = seconds_per_call(
      [&] {
        kiln::rotary_embedding(x).backward(g);
        x.set_grad({});
      },
      0.2);
  emit(name, "time", "ms/iter", sec * 1e3);
}

}  // namespace

void resize_benches(std::vector<Bench>& out) {
  out.push_back({"upsample_nearest_x2", [](const std::string& n) { bench_upsample(n, kiln::InterpolateMode::Nearest); }});
  out.push_back({"upsample_bilinear_x2", [](const std::string& n) { bench_upsample(n, kiln::InterpolateMode::Bilinear); }});
  out.push_back({"rotary_b8h8t256d64", bench_rotary});
}

}  // namespace bench
