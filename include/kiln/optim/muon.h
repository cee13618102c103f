// Muon: momentum, then Newton–Schulz orthogonalisation of the update for
// rank-2 parameters (O1; K. Jordan, github.com/KellerJordan/Muon; J. Liu et
// al., "Muon is Scalable for LLM Training", arXiv 2502.16982).
//
// For a rank-2 parameter W [rows, cols] with gradient G:
//   buf = lerp(buf, G, 1 - momentum)                  (buf = momentum*buf + (1-momentum)*G)
//   U = nesterov ? lerp(G, buf, momentum) : buf
//   O = NS5(U): X = U / (||U||_F + eps), then ns_steps times
//       A = X X^T;  X = a X + (b A + c A A) X,  (a, b, c) = (3.4445, -4.7750, 2.0315)
//       (on U^T when rows > cols, so A is the smaller Gram matrix)
//   W = W * (1 - lr * weight_decay) - lr * scale * O
//   scale = sqrt(max(1, rows / cols))        (Jordan's; default)
//         = 0.2 * sqrt(max(rows, cols))      (match_adamw_rms: Liu et al.'s, update RMS like AdamW's)
// Parameters of any other rank get the same momentum and decay without the
// orthogonalisation (spec 002: "Other ranks use the optimizer's momentum
// update"). Muon owns exactly the parameters it is given: pair it with AdamW
// over a disjoint set (embeddings, heads, norms) when that is wanted.
// Weight decay applies only where the parameter's decay flag is on. The
// orthogonalisation runs in the parameter's dtype (f32 or f64), not bf16.
#pragma once

#include <cstdint>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct MuonOptions {
  double lr = 0.02;
  double momentum = 0.95;
  double weight_decay = 0.0;
  bool nesterov = true;
  int64_t ns_steps = 5;
  double eps = 1e-7;
  bool match_adamw_rms = false;

  template <class F>
  void visit(F&& f) {
    f("lr", lr), f("momentum", momentum), f("weight_decay", weight_decay), f("nesterov", nesterov);
    f("ns_steps", ns_steps), f("eps", eps), f("match_adamw_rms", match_adamw_rms);
  }
  void validate(const char* op) const;
};

class Muon : public OptimizerWith<MuonOptions> {
 public:
  Muon(nn::ParameterList params, const MuonOptions& options = {});
  Muon(std::vector<ParamGroup> groups, const MuonOptions& defaults = {});

 protected:
  void update(size_t group, const nn::Parameter& param, const Tensor& grad) override;
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }
};

// The Newton–Schulz-5 iteration above on a rank-2 tensor: an approximately
// orthogonal matrix (singular values near 1, in about [0.7, 1.2]) with U's
// singular vectors. Exposed for tests and for users composing their own update.
Tensor newton_schulz5(const Tensor& u, int64_t steps = 5, double eps = 1e-7);

}  // namespace kiln::optim
