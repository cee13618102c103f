// Tests of the fused convolutions (kiln/ops/conv_fused.h): channel-blocked
// activations [B, C/16, H, W, 16] and a ReLU in the convolution's pass give
// conv2d / conv_transpose2d + relu (and the layout change) up to f32 rounding
// in value and in every gradient, on oneDNN's kernels (direct, Winograd, the
// few-channel first/last layers); the f64 path (plain loops on converted
// copies) passes gradcheck to second order; bad input is an error.
#include "kiln/ops/conv_fused.h"

#include "src/backend/cpu/linalg/conv.h"
#include "tests/support/ops_testing.h"

namespace kiln {
namespace {

using namespace testing;

// One fused call and its unfused equivalent, on the same tensors.
struct FusedCase {
  const char* name;
  bool transpose;
  Shape x, w;  // x plain [B, C, H, W]; w as conv2d / conv_transpose2d take it
  FusedConvOptions o;
};

// The VQ-VAE's stack (docs/vq.md) at batch 3, and a few variants.
std::vector<FusedCase> cases() {
  return {
      {"first layer 1->32 4x4 s2, blocked out, relu", false, {3, 1, 28, 28}, {32, 1, 4, 4},
       {.stride = 2, .padding = 1, .output_blocked = true, .relu = true}},
      {"32->64 4x4 s2 blocked, relu", false, {3, 32, 14, 14}, {64, 32, 4, 4},
       {.stride = 2, .padding = 1, .input_blocked = true, .output_blocked = true, .relu = true}},
      {"64->64 3x3 (Winograd) blocked", false, {3, 64, 7, 7}, {64, 64, 3, 3},
       {.padding = 1, .input_blocked = true, .output_blocked = true}},
      {"64->64 3x3 (Winograd) blocked, relu", false, {3, 64, 7, 7}, {64, 64, 3, 3},
       {.padding = 1, .input_blocked = true, .output_blocked = true, .relu = true}},
      {"transposed 64->32 4x4 s2 blocked, relu", true, {3, 64, 7, 7}, {64, 32, 4, 4},
       {.stride = 2, .padding = 1, .input_blocked = true, .output_blocked = true, .relu = true}},
      {"transposed 32->1 4x4 s2, blocked in", true, {3, 32, 14, 14}, {32, 1, 4, 4},
       {.stride = 2, .padding = 1, .input_blocked = true}},
      {"plain in, blocked out 16->32 3x3 s1 p0", false, {2, 16, 6, 5}, {32, 16, 3, 3},
       {.output_blocked = true, .relu = true}},
      {"blocked in, plain out 32->8, relu", false, {2, 32, 6, 6}, {8, 32, 2, 2},
       {.stride = 2, .input_blocked = true, .relu = true}},
      {"plain, relu only", false, {2, 3, 6, 6}, {5, 3, 3, 3}, {.padding = 1, .relu = true}},
      {"transposed plain, relu only, output_padding", true, {2, 4, 5, 5}, {4, 6, 3, 3},
       {.stride = 2, .padding = 1, .output_padding = 1, .relu = true}},
  };
}

Tensor unfused(const FusedCase& c, const Tensor& x_plain, const Tensor& w, const Tensor& b) {
  const FusedConvOptions& o = c.o;
  Tensor y = c.transpose ? conv_transpose2d(x_plain, w, b, o.stride, o.padding, o.output_padding)
                         : conv2d(x_plain, w, b, o.stride, ConvPadding(o.padding.h, o.padding.w));
  return o.relu ? relu(y) : y;
}

Tensor fused(const FusedCase& c, const Tensor& x_plain, const Tensor& w, const Tensor& b) {
  Tensor x = c.o.input_blocked ? to_channel_blocked(x_plain) : x_plain;
  Tensor y = c.transpose ? conv_transpose2d_fused(x, w, b, c.o) : conv2d_fused(x, w, b, c.o);
  return c.o.output_blocked ? from_channel_blocked(y) : y;
}

TEST(ConvFused, MatchesUnfusedInValueAndGradientsF32) {
  Generator gen(5);
  for (const FusedCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const int64_t out_ch = c.transpose ? c.w[1] : c.w[0];
    Tensor x0 = randn(c.x, gen), w0 = randn(c.w, gen) * 0.2, b0 = randn({out_ch}, gen) * 0.1;
    std::vector<Tensor> grads[2], outs;
    for (int f = 0; f < 2; ++f) {
      Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
      x.requires_grad_(), w.requires_grad_(), b.requires_grad_();
      Tensor y = f ? fused(c, x, w, b) : unfused(c, x, w, b);
      Tensor cot = Tensor();
      {
        Generator cg(9);
        cot = randn(y.shape(), cg);
      }
      sum(y * cot).backward();
      outs.push_back(y.detach());
      grads[f] = {x.grad(), w.grad(), b.grad()};
    }
    EXPECT_EQ(outs[1].shape(), outs[0].shape());
    EXPECT_TRUE(all_close(outs[1], outs[0], 1e-5, 1e-5)) << "forward";
    if (c.o.relu) {
      EXPECT_EQ(min(outs[1]).item<float>(), 0.f) << "ReLU applied";
    }
    const char* names[] = {"grad x", "grad w", "grad b"};
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(grads[1][i], grads[0][i], 1e-4, 1e-5)) << names[i];
  }
}

// Where oneDNN has 16-channel-blocked kernels (AVX-512) the blocked ops run
// them directly (a JIT kernel, not the converted plain path).
TEST(ConvFused, BlockedRunsNativelyWhereOffered) {
  Generator gen(6);
  Tensor x = randn({2, 2, 6, 6, 16}, gen), w = randn({32, 32, 4, 4}, gen);
  Tensor y = conv2d_fused(x, w, {}, {.stride = 2, .padding = 1, .input_blocked = true, .output_blocked = true, .relu = true});
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3, 3, 16}));
  if (channel_blocked_native()) {
    EXPECT_EQ(backend::cpu::last_conv_impl().rfind("jit", 0), 0u) << backend::cpu::last_conv_impl();
  }
}

TEST(ConvFused, NoFlagsIsConv2dBitwise) {
  Generator gen(3);
  Tensor x = randn({2, 32, 9, 9}, gen), w = randn({16, 32, 3, 3}, gen), b = randn({16}, gen);
  EXPECT_TRUE(equal(conv2d_fused(x, w, b, {.padding = 1}), conv2d(x, w, b, 1, 1)));
  Tensor wt = randn({32, 16, 4, 4}, gen);
  EXPECT_TRUE(equal(conv_transpose2d_fused(x, wt, b, {.stride = 2, .padding = 1}), conv_transpose2d(x, wt, b, 2, 1)));
  // Blocked in and out: the blocked result holds exactly the values the
  // plain call gives in NCHW, element for element (same kernel, same order).
  Tensor yb = conv2d_fused(to_channel_blocked(x), w, b, {.padding = 1, .input_blocked = true, .output_blocked = true});
  EXPECT_TRUE(all_close(from_channel_blocked(yb), conv2d(x, w, b, 1, 1), 1e-6, 1e-6));
}

TEST(ConvFused, ChannelBlockedLayout) {
  // x[b, c, h, w] = its NCHW offset, so each blocked element names where it came from.
  Tensor x = reshape(to(arange(2 * 32 * 3 * 2), kF32), {2, 32, 3, 2});
  Tensor xb = to_channel_blocked(x);
  ASSERT_EQ(xb.shape(), (Shape{2, 2, 3, 2, 16}));
  EXPECT_TRUE(xb.is_contiguous());
  const float* p = static_cast<const float*>(xb.data_ptr());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t c = 0; c < 32; ++c)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t w = 0; w < 2; ++w)
          EXPECT_EQ(p[(((b * 2 + c / 16) * 3 + h) * 2 + w) * 16 + c % 16], float(((b * 32 + c) * 3 + h) * 2 + w));
  EXPECT_TRUE(equal(from_channel_blocked(xb), x));
  // Channels last: [B, H, W, C] out, and a [B, H, W, C] tensor permuted to
  // [B, C, H, W] in (oneDNN's nhwc, the VQ-VAE's latents); a strided view too.
  Tensor x_nhwc = contiguous(permute(x, {0, 2, 3, 1}));
  EXPECT_TRUE(equal(from_channel_blocked(xb, true), x_nhwc));
  EXPECT_TRUE(equal(to_channel_blocked(permute(x_nhwc, {0, 3, 1, 2})), xb));
  EXPECT_TRUE(equal(to_channel_blocked(noncontiguous(x)), xb));
  Tensor x64 = to(x, kF64);  // the strided-copy path (not oneDNN's reorder)
  EXPECT_TRUE(equal(to(from_channel_blocked(to_channel_blocked(permute(to(x_nhwc, kF64), {0, 3, 1, 2})), true), kF32), x_nhwc));
  EXPECT_TRUE(equal(to(to_channel_blocked(x64), kF32), xb));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return to_channel_blocked(in[0]) * 1.5; },
                   {leaf({1, 16, 2, 3}, 1)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return from_channel_blocked(in[0]) * 1.5; },
                   {leaf({1, 2, 2, 1, 16}, 2)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return from_channel_blocked(in[0], true) * 1.5; },
                   {leaf({2, 2, 1, 3, 16}, 3)});
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return to_channel_blocked(permute(in[0], {0, 3, 1, 2})) * 1.5; },
                   {leaf({2, 1, 3, 32}, 4)});
  // The gradient of a channels-last input comes back channels last (contiguous after the permute).
  Generator gz(1);
  Tensor z = randn({2, 3, 3, 32}, gz);
  z.requires_grad_();
  sum(to_channel_blocked(permute(z, {0, 3, 1, 2})) * 2.0).backward();
  EXPECT_TRUE(z.grad().is_contiguous());
  EXPECT_TRUE(equal(z.grad(), full({2, 3, 3, 32}, 2.0)));
}

// f64 runs the plain loops on converted copies (NOTE [Blocked activations]);
// gradients of the fused op (ReLU mask included) to second order.
TEST(ConvFused, GradcheckF64FirstAndSecondOrder) {
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return conv2d_fused(in[0], in[1], in[2],
                            {.stride = 2, .padding = 1, .input_blocked = true, .output_blocked = true, .relu = true});
      },
      {leaf({1, 1, 3, 3, 16}, 11), leaf({16, 16, 3, 3}, 12, -0.3, 0.3), leaf({16}, 13)});
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return conv2d_fused(in[0], in[1], in[2], {.padding = 1, .output_blocked = true, .relu = true});
      },
      {leaf({2, 2, 3, 3}, 14), leaf({16, 2, 3, 3}, 15), leaf({16}, 16)});
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return conv_transpose2d_fused(in[0], in[1], in[2], {.stride = 2, .padding = 1, .input_blocked = true, .relu = true});
      },
      {leaf({1, 1, 2, 3, 16}, 17), leaf({16, 3, 4, 4}, 18, -0.3, 0.3), leaf({3}, 19)});
  EXPECT_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        return conv_transpose2d_fused(in[0], in[1], in[2],
                                      {.stride = 2, .padding = 1, .input_blocked = true, .output_blocked = true});
      },
      {leaf({1, 1, 2, 2, 16}, 20), leaf({16, 16, 3, 3}, 21, -0.3, 0.3), leaf({16}, 22)});
  Fn fn = [](const std::vector<Tensor>& in) {
    return conv2d_fused(in[0], in[1], in[2], {.padding = 1, .input_blocked = true, .output_blocked = true, .relu = true});
  };
  auto r = gradcheck_second_order(fn, {leaf({1, 1, 2, 2, 16}, 23), leaf({16, 16, 2, 2}, 24, -0.3, 0.3), leaf({16}, 25)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(ConvFused, Bf16ThroughThePlainPathIsClose) {
  Generator gen(4);
  Tensor x = randn({2, 32, 8, 8}, gen), w = randn({32, 32, 3, 3}, gen) * 0.1, b = randn({32}, gen);
  const FusedConvOptions o{.padding = 1, .input_blocked = true, .output_blocked = true, .relu = true};
  Tensor y32 = conv2d_fused(to_channel_blocked(x), w, b, o);
  Tensor y16 = conv2d_fused(to_channel_blocked(x.to(kBF16)), w.to(kBF16), b.to(kBF16), o);
  EXPECT_EQ(y16.dtype(), kBF16);
  EXPECT_TRUE(all_close(y16.to(kF32), y32, 2e-2, 5e-2));
}

TEST(ConvFused, Errors) {
  Tensor w = ones({32, 16, 3, 3});
  EXPECT_KILN_ERROR(conv2d_fused(ones({2, 16, 5, 5}), w, {}, {.input_blocked = true}),
                    "[conv2d_fused] input [2, 16, 5, 5] f32 must be [B, C/16, H, W, 16] (input_blocked)");
  EXPECT_KILN_ERROR(conv2d_fused(ones({2, 1, 5, 5, 8}), w, {}, {.input_blocked = true}),
                    "[conv2d_fused] a channel-blocked input must be a contiguous [B, C/16, H, W, 16]");
  EXPECT_KILN_ERROR(conv2d_fused(ones({2, 2, 5, 5, 16}), w, {}, {.input_blocked = true}),
                    "[conv2d_fused] input [2, 2, 5, 5, 16] has 32 channels but weight [32, 16, 3, 3] expects 16");
  EXPECT_KILN_ERROR(conv2d_fused(ones({2, 16, 5, 5}), ones({24, 16, 3, 3}), {}, {.output_blocked = true}),
                    "[conv2d_fused] a channel-blocked output needs output channels in multiples of 16, weight [24, 16, 3, 3] gives 24");
  EXPECT_KILN_ERROR(conv2d_fused(ones({16, 5, 5}), w, {}, {}), "[conv2d_fused] input [16, 5, 5] f32 must be [B, C, H, W]");
  EXPECT_KILN_ERROR(conv_transpose2d_fused(ones({2, 1, 5, 5, 16}), ones({16, 8, 2, 2}), {}, {.input_blocked = true, .output_blocked = true}),
                    "[conv_transpose2d_fused] a channel-blocked output needs output channels in multiples of 16");
  EXPECT_KILN_ERROR(to_channel_blocked(ones({2, 3, 4, 4})), "[to_channel_blocked] input");
  EXPECT_KILN_ERROR(from_channel_blocked(ones({2, 3, 4, 4})), "[from_channel_blocked] input");
}

}  // namespace
}  // namespace kiln
