// kiln::cpu_info(): the machine's features and the kernel choices made from
// them. What is asserted depends on the CPU the suite runs on: nothing here
// assumes AVX-512 or bf16 instructions.
#include <gtest/gtest.h>

#include "kiln/core/cpu_info.h"
#include "kiln/core/error.h"

namespace kiln {
namespace {

TEST(CpuInfo, ChoicesFollowTheFeatures) {
  const CpuInfo& c = cpu_info();
  EXPECT_FALSE(c.model.empty());
  EXPECT_TRUE(c.avx2 && c.fma) << "kiln needs x86-64-v3 (AVX2 + FMA): " << c.model;
  if (!c.avx512) {
    EXPECT_EQ(c.kernel_isa, KernelIsa::avx2);
  }
#ifndef __AVX512F__
  EXPECT_EQ(c.kernel_isa, KernelIsa::avx2) << "a build without AVX-512 has no AVX-512 kernels";
#endif
  if (!c.avx512_bf16 && !c.amx_bf16) {
    EXPECT_EQ(c.bf16, Bf16Compute::f32);
  }
  const std::string s = c.summary();
  EXPECT_NE(s.find(c.model), std::string::npos) << s;
  EXPECT_NE(s.find(std::string("kernels ") + name(c.kernel_isa)), std::string::npos) << s;
  EXPECT_NE(s.find(c.bf16 == Bf16Compute::native ? "bf16 native" : "bf16 computes in f32"), std::string::npos) << s;
}

TEST(CpuInfo, OverridesRefuseWhatTheCpuCannotRun) {
  const CpuInfo& c = cpu_info();
  const KernelIsa isa = c.kernel_isa;
  const Bf16Compute bf16 = c.bf16;
  detail::set_kernel_isa(KernelIsa::avx2);  // every supported CPU runs AVX2
  EXPECT_EQ(cpu_info().kernel_isa, KernelIsa::avx2);
#ifdef __AVX512F__
  constexpr bool built_with_avx512 = true;
#else
  constexpr bool built_with_avx512 = false;
#endif
  if (c.avx512 && built_with_avx512) {
    detail::set_kernel_isa(KernelIsa::avx512);
    EXPECT_EQ(cpu_info().kernel_isa, KernelIsa::avx512);
  } else {
    EXPECT_THROW(detail::set_kernel_isa(KernelIsa::avx512), Error);
  }
  detail::set_bf16_compute(Bf16Compute::f32);  // always possible
  EXPECT_EQ(cpu_info().bf16, Bf16Compute::f32);
  if (!c.avx512_bf16 && !c.amx_bf16) {
    EXPECT_THROW(detail::set_bf16_compute(Bf16Compute::native), Error);
  }
  detail::set_kernel_isa(isa);
  detail::set_bf16_compute(bf16);
}

}  // namespace
}  // namespace kiln
