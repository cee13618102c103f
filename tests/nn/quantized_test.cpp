// Q8_0 / Q4_0 quantization: codes byte-identical to a numpy port of ggml's
// reference quantizer (tools/goldens/ggml_quant.py), the error targets of
// SPECS I5 on Gaussian weights, both kernel ISAs against the reference
// product, QuantizedLinear and quantize(module).
#include "kiln/nn/quantized.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "src/backend/cpu/quant/quant.h"
#include "tests/support/nn_testing.h"

namespace kiln::nn {
namespace {
using namespace kiln::testing;
namespace cpu = backend::cpu;

Tensor from_bits(const nlohmann::json& bits, int64_t rows, int64_t cols) {
  Tensor x = Tensor::empty({rows, cols}, kF32);
  for (int64_t i = 0; i < rows * cols; ++i) x.data<float>()[i] = std::bit_cast<float>(bits[size_t(i)].get<uint32_t>());
  return x;
}

TEST(Quantized, CodesMatchGgmlsReferenceQuantizerByteForByte) {
  for (const auto& c : golden("nn_quant_ggml")["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    int64_t rows = c["rows"], cols = c["cols"];
    Tensor x = from_bits(c["x"], rows, cols);
    for (QuantType type : {QuantType::q8_0, QuantType::q4_0}) {
      SCOPED_TRACE(quant_type_name(type));
      const auto& want = c[quant_type_name(type)];
      QuantizedTensor q = quantize(x, type);
      ASSERT_EQ(q.codes.numel(), int64_t(want["codes"].size()));
      const auto* codes = static_cast<const uint8_t*>(q.codes.data_ptr());
      for (int64_t i = 0; i < q.codes.numel(); ++i) {
        int expect = want["codes"][size_t(i)].get<int>();
        int got = type == QuantType::q8_0 ? int(int8_t(codes[i])) : int(codes[i]);
        ASSERT_EQ(got, expect) << "code " << i;
      }
      ASSERT_EQ(q.scales.numel(), int64_t(want["scales"].size()));
      for (int64_t i = 0; i < q.scales.numel(); ++i) {
        uint16_t bits = want["scales"][size_t(i)].get<uint16_t>();
        EXPECT_EQ(cpu::fp32_to_fp16(q.scales.data<float>()[i]), bits) << "scale " << i;
        EXPECT_EQ(q.scales.data<float>()[i], cpu::fp16_to_fp32(bits)) << "scale " << i;
      }
    }
  }
}

TEST(Quantized, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(cpu::fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(cpu::fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(cpu::fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(cpu::fp32_to_fp16(65520.0f), 0x7c00);                   // rounds up to infinity
  EXPECT_EQ(cpu::fp32_to_fp16(1.0f + 1.0f / 2048), 0x3c00);         // tie: even (down)
  EXPECT_EQ(cpu::fp32_to_fp16(1.0f + 3.0f / 2048), 0x3c02);         // tie: even (up)
  EXPECT_EQ(cpu::fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);      // smallest subnormal
  EXPECT_EQ(cpu::fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);      // tie to even zero
  EXPECT_EQ(cpu::fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);
  // Every half round-trips.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    ASSERT_EQ(cpu::fp32_to_fp16(cpu::fp16_to_fp32(uint16_t(h))), h) << h;
  }
}

// SPECS I5's targets: relative RMS error of the product vs f32 on Gaussian weights.
TEST(Quantized, MatrixVectorErrorWithinTargets) {
  Generator gen(7);
  Tensor w = randn({256, 1024}, gen), x = randn({4, 1024}, gen);
  Tensor y = linear(x, w);
  for (auto [type, target] : {std::pair{QuantType::q8_0, 0.007}, std::pair{QuantType::q4_0, 0.10}}) {
    Tensor yq = quantized_linear(x, quantize(w, type));
    double num = 0, den = 0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      double d = double(yq.data<float>()[i]) - y.data<float>()[i];
      num += d * d;
      den += double(y.data<float>()[i]) * y.data<float>()[i];
    }
    double rel = std::sqrt(num / den);
    std::printf("relative RMS error of %s: %.5f (target %.3f)\n", quant_type_name(type), rel, target);
    EXPECT_LE(rel, target) << quant_type_name(type);
    EXPECT_GT(rel, 0.0);
  }
}

// The kernels quantize each input row per 32-block (int8 for Q4, int16 for
// Q8) before their integer dot products, so against the f64 reference they
// differ by x's rounding only: |x - x'| <= d / 2 with d = max|x_block| / qmax,
// so |y - ref| <= sum_b d_b / 2 * sum_j |w_bj| (w the dequantized weights),
// plus f32 summation (1e-5 of sum |w x|). The bound is computed here from the
// input and the weights alone, not from the kernels' own quantized x.
double x_rounding_bound(const Tensor& wd, const float* x, int64_t r, int64_t cols, double qmax) {
  double bound = 0, mag = 0;
  for (int64_t b = 0; b < cols / kQuantBlock; ++b) {
    double amax = 0, wsum = 0;
    for (int64_t j = b * kQuantBlock; j < (b + 1) * kQuantBlock; ++j) {
      amax = std::max(amax, double(std::fabs(x[j])));
      wsum += std::fabs(wd.data<float>()[r * cols + j]);
      mag += std::fabs(double(wd.data<float>()[r * cols + j]) * x[j]);
    }
    bound += amax / qmax / 2 * wsum;
  }
  return bound * 1.001 + 1e-5 * mag + 1e-30;
}

/// Every kernel this CPU can run: both ISA copies, and on an AVX512-VNNI CPU
/// the AVX-512 copy with and without vpdpbusd.
void for_each_quant_kernel(const std::function<void(const std::string&)>& body) {
  for_each_kernel_isa([&](KernelIsa isa) {
    if (isa == KernelIsa::avx512 && cpu::q4_0_uses_vnni()) {
      body("avx512-vnni");
      bool saved = cpu::detail::set_quant_vnni_allowed(false);
      EXPECT_FALSE(cpu::q4_0_uses_vnni());
      body("avx512 without vnni");
      cpu::detail::set_quant_vnni_allowed(saved);
    } else {
      body(cpu::quant_kernel_name());
    }
  });
}

TEST(Quantized, KernelsMatchTheReferenceOnEveryIsa) {
  std::printf("quantized products here: %s\n", cpu::quant_kernel_name());
  Generator gen(3);
  // cols 32..256: whole and partial groups of blocks (AVX-512 takes 4 blocks
  // of Q4 codes at a time, AVX2 2); rows: whole and partial tiles of 4.
  for (int64_t cols : {32, 96, 224, 256}) {
    for (int64_t rows : {1, 7, 40}) {
      for (int64_t batch : {1, 3, 4, 5, 9}) {
        Tensor w = randn({rows, cols}, gen), x = randn({batch, cols}, gen);
        if (cols == 224) {  // a zero block, a block with one large value, tiny values
          for (int64_t j = 0; j < 32; ++j) x.data<float>()[j] = 0.0f;
          x.data<float>()[40] = 300.0f;
          for (int64_t j = 64; j < 96; ++j) x.data<float>()[j] *= 1e-30f;
        }
        for (QuantType type : {QuantType::q8_0, QuantType::q4_0}) {
          QuantizedTensor q = quantize(w, type);
          Tensor wd = dequantize(q);
          const auto* codes = static_cast<const uint8_t*>(q.codes.data_ptr());
          std::vector<float> want(size_t(rows * batch));
          if (type == QuantType::q8_0)
            cpu::ref::q8_0_matmul(reinterpret_cast<const int8_t*>(codes), q.scales.data<float>(), rows, cols,
                                  x.data<float>(), batch, want.data());
          else
            cpu::ref::q4_0_matmul(codes, q.scales.data<float>(), rows, cols, x.data<float>(), batch, want.data());
          // The reference equals the dequantized matrix times x.
          Tensor yd = linear(x, wd);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(yd.data<float>()[i], want[i], 1e-4 * (1 + std::fabs(want[i])));
          const double qmax = type == QuantType::q8_0 ? 32767 : 127;
          for_each_quant_kernel([&](const std::string& kernel) {
            Tensor y = quantized_linear(x, q);
            double worst = 0;  // largest error as a fraction of its bound
            for (int64_t k = 0; k < batch; ++k)
              for (int64_t r = 0; r < rows; ++r) {
                double got = y.data<float>()[k * rows + r], ref = want[size_t(k * rows + r)];
                double bound = x_rounding_bound(wd, x.data<float>() + k * cols, r, cols, qmax);
                ASSERT_LE(std::fabs(got - ref), bound) << quant_type_name(type) << " " << kernel << " cols " << cols
                                                       << " rows " << rows << " batch " << batch << " at " << k
                                                       << ", " << r;
                worst = std::max(worst, std::fabs(got - ref) / bound);
              }
            EXPECT_GT(worst, 0.0);  // x was rounded (the bound is not vacuous)
          });
        }
      }
    }
  }
}

// The kernels of every ISA give the same integer sums: their results agree to
// f32 summation order (much tighter than the bound above).
TEST(Quantized, KernelsAgreeWithEachOther) {
  Generator gen(5);
  const int64_t rows = 37, cols = 352, batch = 2;
  Tensor w = randn({rows, cols}, gen), x = randn({batch, cols}, gen);
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0}) {
    QuantizedTensor q = quantize(w, type);
    std::vector<Tensor> ys;
    for_each_quant_kernel([&](const std::string&) { ys.push_back(quantized_linear(x, q)); });
    for (size_t v = 1; v < ys.size(); ++v)
      for (int64_t i = 0; i < rows * batch; ++i)
        EXPECT_NEAR(ys[v].data<float>()[i], ys[0].data<float>()[i], 2e-5 * (1 + std::fabs(ys[0].data<float>()[i])))
            << quant_type_name(type) << " kernel " << v << " at " << i;
  }
}

// A NaN or an infinity in x reaches y as in f32 (the integer kernels hand
// such inputs to the reference); subnormal inputs quantize without overflow.
TEST(Quantized, NonFiniteAndSubnormalInputs) {
  Generator gen(13);
  Tensor w = randn({8, 64}, gen);
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0}) {
    QuantizedTensor q = quantize(w, type);
    for_each_quant_kernel([&](const std::string& kernel) {
      Tensor x = randn({2, 64}, gen);
      x.data<float>()[3] = std::nanf("");
      x.data<float>()[64 + 40] = INFINITY;
      Tensor y = quantized_linear(x, q);
      for (int64_t r = 0; r < 8; ++r) {
        EXPECT_TRUE(std::isnan(y.data<float>()[r])) << kernel;
        EXPECT_FALSE(std::isfinite(y.data<float>()[8 + r])) << kernel;
      }
      Tensor tiny = randn({1, 64}, gen);
      for (int64_t i = 0; i < 64; ++i) tiny.data<float>()[i] *= 1e-40f;  // subnormal
      Tensor yt = quantized_linear(tiny, q);
      std::vector<float> want(8);
      const auto* codes = static_cast<const uint8_t*>(q.codes.data_ptr());
      if (type == QuantType::q8_0)
        cpu::ref::q8_0_matmul(reinterpret_cast<const int8_t*>(codes), q.scales.data<float>(), 8, 64,
                              tiny.data<float>(), 1, want.data());
      else
        cpu::ref::q4_0_matmul(codes, q.scales.data<float>(), 8, 64, tiny.data<float>(), 1, want.data());
      // Subnormal arithmetic keeps few bits: within 2% of sum |w x| (not
      // of y, which may cancel).
      Tensor wd = dequantize(q);
      for (int64_t r = 0; r < 8; ++r) {
        double mag = 0;
        for (int64_t c = 0; c < 64; ++c) mag += std::fabs(double(wd.data<float>()[r * 64 + c]) * tiny.data<float>()[c]);
        ASSERT_TRUE(std::isfinite(yt.data<float>()[r])) << kernel;
        EXPECT_NE(yt.data<float>()[r], 0.0f) << kernel;
        EXPECT_NEAR(yt.data<float>()[r], want[size_t(r)], 0.02 * mag) << kernel;
      }
    });
  }
}

// From kDequantizeBatch (32) rows of x, quantized_linear multiplies by the
// dequantized matrix in f32: no rounding of x, the reference's result.
TEST(Quantized, LargeBatchesUseTheDequantizedMatrix) {
  Generator gen(9);
  const int64_t rows = 24, cols = 64, batch = 40;
  Tensor w = randn({rows, cols}, gen), x = randn({batch, cols}, gen), b = randn({rows}, gen);
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0}) {
    QuantizedTensor q = quantize(w, type);
    Tensor want = linear(x, dequantize(q), b);
    Tensor y = quantized_linear(x, q, b);
    ASSERT_EQ(y.shape(), (Shape{batch, rows}));
    for (int64_t i = 0; i < y.numel(); ++i)
      EXPECT_NEAR(y.data<float>()[i], want.data<float>()[i], 1e-5 * (1 + std::fabs(want.data<float>()[i])));
  }
}

/// Copies of `m`'s quantizable weights replaced by their dequantized values:
/// the f32 model the quantized one stands for.
void load_dequantized(Module& m, QuantType type) {
  NoGradGuard no_grad;
  for (auto& [name, p] : m.named_parameters())
    if (p.value().dim() == 2 && p.value().size(1) % kQuantBlock == 0)
      copy_(p.value(), dequantize(quantize(p.value(), type)));
}

// MultiheadAttention's packed in-projection [3D, D] is quantized with the
// Linear layers; self- and cross-attention read the q, k, v rows of one copy.
TEST(Quantized, MultiheadAttentionInProjectionIsQuantized) {
  Rngs rngs(21);
  Init init(rngs);
  Generator gen(22);
  MultiheadAttention mha(64, 4, init);
  Tensor x = randn({2, 5, 64}, gen), mem = randn({2, 3, 64}, gen), val = randn({2, 3, 64}, gen);
  EXPECT_EQ(quantize(mha, QuantType::q8_0), 2);  // in_proj_weight and out_proj
  ASSERT_TRUE(mha.in_proj_quantized);
  EXPECT_EQ(mha.in_proj_quantized->shape, (Shape{192, 64}));
  Tensor yq, cq, dq;
  {
    NoGradGuard no_grad;
    yq = mha.forward(x, x, x, {.need_weights = false}).output;
    cq = mha.forward(x, mem, mem, {.need_weights = false}).output;
    dq = mha.forward(x, mem, val, {.need_weights = false}).output;
  }
  mha.in_proj_quantized = nullptr;
  mha.out_proj->quantized = nullptr;
  load_dequantized(mha, QuantType::q8_0);
  NoGradGuard no_grad;
  Tensor y = mha.forward(x, x, x, {.need_weights = false}).output;
  Tensor c = mha.forward(x, mem, mem, {.need_weights = false}).output;
  Tensor d = mha.forward(x, mem, val, {.need_weights = false}).output;
  // Q8's int16 rounding of x: about 1e-5 of |y|.
  for (auto [got, want] : {std::pair{yq, y}, std::pair{cq, c}, std::pair{dq, d}})
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 2e-4 * (1 + std::fabs(want.data<float>()[i]))) << i;
}

// release_float_weights: the f32 weights of quantized layers are freed (one
// shared zero each), inference still runs, training through them is refused.
TEST(Quantized, ReleasedFloatWeightsFreeTheirMemory) {
  Rngs rngs(31);
  Init init(rngs);
  Generator gen(32);
  Sequential net(Linear(64, 96, init), ReLU(), Linear(96, 64, init));
  MultiheadAttention mha(64, 2, init);
  Tensor x = randn({3, 64}, gen);
  Tensor y_kept, a_kept;
  {
    NoGradGuard no_grad;
    quantize(net, QuantType::q4_0);
    quantize(mha, QuantType::q4_0);
    y_kept = net.forward(x);
    a_kept = mha.forward(x.unsqueeze(0), x.unsqueeze(0), x.unsqueeze(0), {.need_weights = false}).output;
  }
  EXPECT_EQ(quantize(net, QuantType::q4_0, {.release_float_weights = true}), 2);
  EXPECT_EQ(quantize(mha, QuantType::q4_0, {.release_float_weights = true}), 2);
  for (const Tensor& w : {net.at<Linear>(0)->weight.value(), net.at<Linear>(2)->weight.value(),
                          mha.in_proj_weight.value(), mha.out_proj->weight.value()}) {
    EXPECT_TRUE(is_released(w));
    EXPECT_EQ(w.storage()->nbytes(), sizeof(float));
  }
  EXPECT_EQ(net.at<Linear>(0)->weight.shape(), (Shape{96, 64}));  // structure and keys unchanged
  EXPECT_FALSE(is_released(net.at<Linear>(0)->bias.value()));
  {
    NoGradGuard no_grad;
    EXPECT_TRUE(equal(net.forward(x), y_kept));
    EXPECT_TRUE(equal(mha.forward(x.unsqueeze(0), x.unsqueeze(0), x.unsqueeze(0), {.need_weights = false}).output,
                      a_kept));
  }
  EXPECT_KILN_ERROR(net.forward(x), "released for quantized inference");
  EXPECT_KILN_ERROR(mha.forward(x.unsqueeze(0), x.unsqueeze(0), x.unsqueeze(0)), "released for quantized inference");
  EXPECT_KILN_ERROR(quantize(net, QuantType::q8_0), "released");
}

TEST(Quantized, AttachQuantizedByStateDictName) {
  Rngs rngs(41);
  Init init(rngs);
  Generator gen(42);
  Sequential net(Linear(32, 8, init), Linear(8, 4, init));
  auto q = std::make_shared<const QuantizedTensor>(quantize(randn({8, 32}, gen), QuantType::q8_0));
  EXPECT_EQ(attach_quantized(net, {{"0.weight", q}}), 1);
  EXPECT_EQ(net.at<Linear>(0)->quantized, q);
  auto wrong = std::make_shared<const QuantizedTensor>(quantize(randn({16, 32}, gen), QuantType::q8_0));
  net.at<Linear>(0)->quantized = nullptr;
  EXPECT_KILN_ERROR(attach_quantized(net, {{"0.weight", q}, {"1.weight", wrong}}), "1.weight: quantized [16, 32]");
  EXPECT_FALSE(net.at<Linear>(0)->quantized);  // all or nothing
}

TEST(Quantized, DequantizeInvertsCodesExactlyOnRepresentableValues) {
  // Values k * scale with |k| <= 127 and a half scale quantize without error in Q8.
  Tensor x = Tensor::empty({2, 32}, kF32);
  for (int64_t i = 0; i < 64; ++i) x.data<float>()[i] = float(int(i * 37 % 255) - 127) * 0.25f;
  x.data<float>()[5] = 127 * 0.25f;
  x.data<float>()[32 + 5] = 127 * 0.25f;
  Tensor back = dequantize(quantize(x, QuantType::q8_0));
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(back.data<float>()[i], x.data<float>()[i]) << i;
}

TEST(Quantized, QuantizedLinearAndQuantizeModule) {
  Rngs rngs(11);
  Init init(rngs);
  Generator gen(12);
  Sequential net(Linear(64, 32, init), ReLU(), Linear(32, 5, init), ReLU(), Linear(5, 3, init));
  Tensor x = randn({2, 64}, gen);
  Tensor y = net.forward(x);
  QuantizedLinear ql = QuantizedLinear::from_linear(*net.at<Linear>(0), QuantType::q8_0);
  EXPECT_EQ(ql.in_features, 64);
  auto sd = ql.state_dict();
  EXPECT_TRUE(sd.contains("weight_codes"));
  EXPECT_TRUE(sd.contains("weight_scales"));
  EXPECT_TRUE(sd.contains("bias"));
  Tensor y0 = net.at<Linear>(0)->forward(x);
  Tensor yq = ql.forward(x);
  for (int64_t i = 0; i < y0.numel(); ++i) EXPECT_NEAR(yq.data<float>()[i], y0.data<float>()[i], 0.05);

  // The first two Linears (in_features 64 and 32) are quantized, the last (in 5: not whole blocks) is not.
  EXPECT_EQ(quantize(net, QuantType::q8_0), 2);
  EXPECT_TRUE(net.at<Linear>(0)->quantized);
  EXPECT_FALSE(net.at<Linear>(4)->quantized);
  {
    NoGradGuard no_grad;
    Tensor yq2 = net.forward(x);
    double err = 0;
    for (int64_t i = 0; i < y.numel(); ++i) err = std::max(err, double(std::fabs(yq2.data<float>()[i] - y.data<float>()[i])));
    EXPECT_LT(err, 0.05);
    EXPECT_GT(err, 0.0);  // the quantized path ran
  }
  Tensor ygrad = net.forward(x);  // grad mode: the f32 weights
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(ygrad.data<float>()[i], y.data<float>()[i]);
}

TEST(Quantized, ErrorsNameTheProblem) {
  Generator gen(1);
  EXPECT_KILN_ERROR(quantize(randn({4, 33}, gen), QuantType::q8_0), "cols a multiple of 32");
  EXPECT_KILN_ERROR(quantize(randn({64}, gen), QuantType::q4_0), "matrix");
  EXPECT_KILN_ERROR(parse_quant_type("q5_k"), "unknown quantization 'q5_k'");
  QuantizedTensor q = quantize(randn({4, 64}, gen), QuantType::q4_0);
  EXPECT_KILN_ERROR(quantized_linear(randn({2, 32}, gen), q), "in_features 64");
  EXPECT_KILN_ERROR(quantized_linear(randn({2, 64}, gen), q, randn({5}, gen)), "bias");
  QuantizedTensor bad = q;
  bad.codes = Tensor::empty({4, 64}, kU8);  // q8 size for a q4 tensor
  EXPECT_KILN_ERROR(QuantizedLinear{bad}, "q4_0 codes must be contiguous u8 [4, 32]");
  EXPECT_EQ(parse_quant_type("Q4_0"), QuantType::q4_0);
}

}  // namespace
}  // namespace kiln::nn
