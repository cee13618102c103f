// Time embeddings for diffusion and flow-matching models (SPECS G6):
// DiT's `timestep_embedding` and `TimestepEmbedder` (facebookresearch/DiT
// models.py), for a continuous time t.
//
// Time scale: flow matching runs t over [0, 1]; DiT's frequencies were chosen
// for integer steps 0..999. `time_scale` (default 1000) multiplies t before the
// sinusoids, so t in [0, 1] covers the same phases as DiT's steps 0..1000, and
// a DiT time embedding of step s equals kiln's of t = s / 1000.
//
// Letters: B batch, F frequency_dim (the sinusoid width), D the MLP's width.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/nn/containers.h"
#include "kiln/nn/init.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

/// t [B] (any floating dtype) -> [B, F]:
///   [cos(a_0) .. cos(a_{h-1}), sin(a_0) .. sin(a_{h-1})] (+ one zero column when F is odd),
///   a_i = time_scale * t * f_i,  f_i = max_period^(-i / h),  h = F / 2,
/// DiT's timestep_embedding (cos first). The frequencies are computed once, at
/// construction, in f64; the phases and the sinusoids are evaluated in f64 and
/// rounded to `dtype` (DiT evaluates them in f32, whose phase error at t = 1000
/// is ~1e-4 rad: the f64 values are the exact ones it approximates). No
/// gradient flows to t (it is data, never a parameter). No parameters.
class SinusoidalTimeEmbedding : public Module {
 public:
  explicit SinusoidalTimeEmbedding(int64_t dim, double max_period = 10000.0, double time_scale = 1000.0,
                                   DType dtype = kF32);
  Tensor forward(const Tensor& t) const;
  std::string extra_repr() const override;

  int64_t dim;
  double max_period;
  double time_scale;
  DType dtype;                // of the output
  std::vector<double> freqs;  // [F / 2], f_i = max_period^(-i / (F / 2))
};

/// DiT's TimestepEmbedder: mlp(sinusoid(t)), mlp = Linear(F, D), SiLU,
/// Linear(D, D); state-dict keys mlp.0.weight, mlp.0.bias, mlp.2.weight,
/// mlp.2.bias, as DiT's t_embedder.mlp. t [B] -> [B, D].
class TimestepEmbedding : public Module {
 public:
  TimestepEmbedding(int64_t hidden_size, const Init& init, int64_t frequency_dim = 256,
                    double max_period = 10000.0, double time_scale = 1000.0);
  Tensor forward(const Tensor& t) const;
  std::string extra_repr() const override;

  int64_t hidden_size;
  SinusoidalTimeEmbedding sinusoid;  // not a child: it holds no state
  Shared<Sequential> mlp;
};

}  // namespace kiln::nn
