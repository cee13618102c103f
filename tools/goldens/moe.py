"""Goldens for kiln/nn/moe.h (nn::MoE): a dense PyTorch oracle that runs every
expert on every token and masks by the top-k selection (no grouping, no
permutation: nothing the kiln layer does is reused), in f64 from f32 inputs.

Inputs come from an integer hash that the C++ test recomputes exactly
(moe_value below: 24-bit values times a power of two, exact in f32), so the
file holds only the results. D 32, E 8, F 64, 256 tokens; cases: GELU and
SwiGLU experts, k in {1, 2}, with and without renormalisation, every token
routed to expert 3, and one with the Switch aux loss and the z-loss on.
Each case: {"name", "activation", "k", "renormalize", "alpha", "beta",
"one_expert", "counts" [E], and the checks}. Gradients are of
sum(out * c) (+ aux when alpha or beta > 0) with c from the hash (seed 5).
To keep the file small, a tensor T is stored as its sums over the last dim
("<T>_rowsum") and every stride-th element ("<T>_every", stride "stride_<T>");
router weight gradients are stored whole.

Routing formulas (written out):
  p = softmax(x @ Wr^T); idx = topk(p, k); w = p[idx] (/ sum when renormalize)
  out = sum_e mask_e * w_e * expert_e(x)
  f_e = count_e / (N k), P_e = mean_n p[n, e]
  aux = alpha * E * sum_e f_e * P_e;  z = beta * mean_n logsumexp(logits_n)^2
"""
import numpy as np
import torch
import torch.nn.functional as Fn

from . import common

D, E, F, N = 32, 8, 64, 256


def moe_value(count, seed, scale):
    """count values in [-scale / 2, scale / 2): ((i * 2654435761 + seed * 40503 + 12345) mod 2^32 >> 8) / 2^24 - 0.5."""
    i = np.arange(count, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(seed * 40503 + 12345)) % np.uint64(2 ** 32)
    v = (h >> np.uint64(8)).astype(np.float64) / float(2 ** 24) - 0.5
    return torch.tensor(v * scale, dtype=torch.float64)


def inputs(activation, one_expert):
    up = 2 * F if activation == "swiglu" else F
    x = moe_value(N * D, 1, 2.0).reshape(N, D)
    wr = moe_value(E * D, 2, 1.0).reshape(E, D)
    w1 = moe_value(E * up * D, 3, 0.25).reshape(E, up, D)
    w2 = moe_value(E * D * F, 4, 0.25).reshape(E, D, F)
    c = moe_value(N * D, 5, 2.0).reshape(N, D)
    if one_expert:  # a feature that is 1 everywhere, and a router row that loves it
        x[:, 0] = 1.0
        wr[3, 0] = 16.0
    return x, wr, w1, w2, c


def dense_moe(x, wr, w1, w2, k, renormalize, activation):
    logits = x @ wr.T
    top = logits.detach().sort(-1, descending=True).values
    # kiln selects in f32: the k-th and (k+1)-th scores must not be a near tie.
    assert (top[:, k - 1] - top[:, k]).min() > 1e-4
    p = torch.softmax(logits, -1)
    idx = torch.topk(p, k, dim=-1).indices
    mask = torch.zeros_like(p).scatter(1, idx, 1.0)
    w = p * mask
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(E):  # every expert on every token, masked by the selection
        h = x @ w1[e].T
        if activation == "swiglu":
            g, u = h.split(F, -1)
            h = Fn.silu(g) * u
        else:
            h = Fn.gelu(h)
        out = out + w[:, e:e + 1] * (h @ w2[e].T)
    return out, logits, p, mask


def _f32(v):
    return [float(str(np.float32(a))) for a in v]


def _pack(name, t, stride):
    t = t.detach().to(torch.float32)
    flat = t.reshape(-1)
    return {f"{name}_rowsum": _f32(t.to(torch.float64).sum(-1).reshape(-1).tolist()),
            f"{name}_every": _f32(flat[::stride].tolist()), f"stride_{name}": stride}


def case(name, activation, k, renormalize, one_expert=False, alpha=0.0, beta=0.0):
    x, wr, w1, w2, c = inputs(activation, one_expert)
    x, wr, w1, w2 = (t.clone().requires_grad_() for t in (x, wr, w1, w2))
    out, logits, p, mask = dense_moe(x, wr, w1, w2, k, renormalize, activation)
    counts = mask.sum(0)
    f = counts / (N * k)
    P = p.mean(0)
    aux = alpha * E * (f * P).sum()
    z = beta * (torch.logsumexp(logits, -1) ** 2).mean()
    ((out * c).sum() + aux + z).backward()
    j = {"name": name, "activation": activation, "k": k, "renormalize": renormalize, "alpha": alpha,
         "beta": beta, "one_expert": one_expert, "counts": [int(v) for v in counts.tolist()],
         "aux": float(aux), "z": float(z), "z_value": float((torch.logsumexp(logits, -1) ** 2).mean()),
         "grad_router": _f32(wr.grad.reshape(-1).tolist())}
    j.update(_pack("out", out, 32))
    j.update(_pack("grad_x", x.grad, 32))
    j.update(_pack("grad_w1", w1.grad, 128))
    j.update(_pack("grad_w2", w2.grad, 64))
    return j


def generate():
    cases = [
        case("gelu_k1", "gelu", 1, False),
        case("gelu_k2", "gelu", 2, False),
        case("gelu_k2_renorm", "gelu", 2, True),
        case("swiglu_k1_renorm", "swiglu", 1, True),
        case("swiglu_k2_renorm", "swiglu", 2, True),
        case("gelu_k2_renorm_one_expert", "gelu", 2, True, one_expert=True),
        case("gelu_k2_renorm_aux_z", "gelu", 2, True, alpha=0.01, beta=0.001),
    ]
    common.dump("moe", {"D": D, "E": E, "F": F, "N": N, "cases": cases})
