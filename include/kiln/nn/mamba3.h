// Mamba-3 (SPECS G2; docs/ssm.md): the selective state-space mixer of
// state-spaces/mamba's mamba_ssm/modules/mamba3.py, single-input
// single-output variant, with an exact recurrent step. Letters: B batch,
// T time, D d_model, Di = expand D (d_inner), H = Di / headdim heads,
// P headdim, N d_state, R rotary angle pairs (floor(N rope_fraction / 2)).
//
//   nn::Mamba3 mixer(128, {.d_state = 64}, rngs);
//   auto [y, st] = mixer.forward(x);          // x [B, T, 128] -> y [B, T, 128]
//   auto [y1, st2] = mixer.step(x1, st);      // x1 [B, 128] or [B, 1, 128]
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/module.h"
#include "kiln/nn/norm.h"
#include "kiln/nn/state_dict.h"
#include "kiln/ops/ssm.h"

namespace kiln::nn {

/// Upstream's defaults (Mamba3.__init__).
struct Mamba3Options {
  int64_t d_state = 128;
  int64_t expand = 2;
  int64_t headdim = 64;
  double rope_fraction = 0.5;  // 0.5 or 1.0: the share of the state dims rotated
  double dt_min = 1e-3;        // dt_bias = softplus^-1(dt), dt log-uniform in [dt_min, dt_max]
  double dt_max = 0.1;
  double dt_init_floor = 1e-4;
  double A_floor = 1e-4;  // A <= -A_floor
  int64_t chunk_size = 32;  // the scan's chunk: steps per stored state in backward, the chunked form's block length
};

/// The recurrent state of one Mamba3 layer (kiln/ops/ssm.h's Mamba3State):
/// angle [B, H, R], h [B, H, P, N], k [B, H, N], v [B, H, P].
using Mamba3State = ::kiln::Mamba3State;

/// The state as a StateDict {"angle", "h", "k", "v"} (saves into a
/// checkpoint or a safetensors file) and back; from_state_dict checks the
/// four keys are present.
StateDict mamba3_state_dict(const Mamba3State& state);
Mamba3State mamba3_state_from_dict(const StateDict& dict);

class Mamba3 : public Module {
 public:
  Mamba3(int64_t d_model, const Mamba3Options& options, const Init& init);
  Mamba3(int64_t d_model, const Init& init) : Mamba3(d_model, Mamba3Options{}, init) {}

  /// x [B, T, D] -> (y [B, T, D], the state after the last step), starting from
  /// `state` (undefined: zeros). T steps of step() give the same values.
  std::pair<Tensor, Mamba3State> forward(const Tensor& x, const Mamba3State& state = {}) const;
  /// One token: x [B, D] -> y [B, D], or [B, 1, D] -> [B, 1, D]. `state`
  /// undefined: zeros.
  std::pair<Tensor, Mamba3State> step(const Tensor& x, const Mamba3State& state) const;
  /// The zero state for a batch of `batch` sequences.
  Mamba3State zero_state(int64_t batch) const;

  std::string extra_repr() const override;

  int64_t d_model, d_inner, nheads, headdim, d_state, num_rope_angles;
  Mamba3Options options;
  // in_proj [D] -> [z Di | x Di | B N | C N | dt H | A H | trap H | angles R], no bias.
  Shared<Linear> in_proj;
  Parameter dt_bias;         // [H], no weight decay
  Parameter B_bias, C_bias;  // [H, N], ones, no weight decay
  Shared<RMSNorm> B_norm, C_norm;  // RMSNorm(N, eps 1e-5) over B and C
  Parameter D;               // [H], ones, no weight decay
  Shared<Linear> out_proj;   // [Di] -> [D], no bias

 private:
  void check_state(const Mamba3State& s, int64_t batch, const Tensor& x) const;
};

}  // namespace kiln::nn
