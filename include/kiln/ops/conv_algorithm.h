// Which algorithm kiln's convolutions use where there is a choice
// (docs/performance.md, "vqvae_b128 and dit_b64").
#pragma once

namespace kiln {

/// f32 3x3 stride-1 convolutions (no groups or dilation, input and output
/// channels multiples of 16) run oneDNN's Winograd F(4x4, 3x3) kernels where
/// the CPU has them (AVX-512; AVX2 CPUs keep the direct kernels): 1.5-2x
/// faster, results within f32 rounding of the direct kernel's (a few ulp of
/// the output's scale). On by default; `set_conv_winograd(false)`, or
/// KILN_CONV_WINOGRAD=0 in the environment at start-up, keeps every
/// convolution direct (as PyTorch's CPU convolutions are). Process-wide.
void set_conv_winograd(bool enabled);
/// Whether eligible convolutions run Winograd kernels (see set_conv_winograd).
bool conv_winograd();

}  // namespace kiln
