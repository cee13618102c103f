"""Goldens for kiln/ops/attention.h: scaled_dot_product_attention's output,
weights and the gradients of sum(out * g) w.r.t. q, k and v, from PyTorch 1.13
plain ops (1.13 has no F.scaled_dot_product_attention):

    softmax(q k^T * scale + where(allowed, 0, -inf)) v

with allowed = mask & (j <= i + Tk - Tq if causal), and rows that allow no key
set to zero weights (their scores are replaced by 0 before the softmax so
autograd stays finite, then the weights are zeroed). Inputs are f32 values;
the reference runs in f64. tests/ops/attention_test.cpp reads the cases."""
import torch

from . import common


def _f32(*shape, seed):
    """Normal values rounded to multiples of 1/64: exact in f32 and short in JSON."""
    return (common.randn(*shape, seed=seed) * 64).round().div(64).to(torch.float32)


def _out(x):
    """A result rounded to 1e-7 (tests compare with atol >= 1e-6), to keep the file small."""
    return common.t(x.detach().mul(1e7).round().div(1e7))


def _reference(q, k, v, mask, causal, scale):
    tq, tk = q.shape[-2], k.shape[-2]
    allowed = torch.ones(tq, tk, dtype=torch.bool)
    if causal:
        allowed = allowed & torch.ones(tq, tk, dtype=torch.bool).tril(diagonal=tk - tq)
    if mask is not None:
        allowed = allowed & mask
    s = q @ k.transpose(-2, -1) * scale
    dead = ~allowed.any(-1, keepdim=True)
    s = torch.where(dead, torch.zeros((), dtype=s.dtype), s)
    s = s + torch.where(allowed | dead, 0.0, float("-inf")).to(s.dtype)
    w = torch.softmax(s, -1)
    w = torch.where(dead, torch.zeros((), dtype=w.dtype), w)
    return w @ v, w


def _case(name, b, h, tq, tk, dh, dv, seed, causal=False, scale=None, mask=None):
    q, k, v = _f32(b, h, tq, dh, seed=seed), _f32(b, h, tk, dh, seed=seed + 1), _f32(b, h, tk, dv, seed=seed + 2)
    g = _f32(b, h, tq, dv, seed=seed + 3)
    s = scale if scale is not None else dh ** -0.5
    q64, k64, v64 = (t.double().requires_grad_(True) for t in (q, k, v))
    out, w = _reference(q64, k64, v64, mask, causal, s)
    (out * g.double()).sum().backward()
    c = {"name": name, "causal": causal, "scale": scale, "q": common.t(q), "k": common.t(k), "v": common.t(v),
         "g": common.t(g), "out": _out(out), "weights": _out(w), "dq": _out(q64.grad), "dk": _out(k64.grad),
         "dv": _out(v64.grad)}
    if mask is not None:
        c["mask"] = common.t(mask)
    return c


def _cases():
    gen = common.gen(40)
    pad = torch.tensor([[True, True, False, False], [False, False, False, False]])  # batch 1: no key
    full = torch.rand(1, 2, 3, 5, generator=gen) < 0.6
    full[0, 1, 2, :] = False  # a fully masked row
    rect = torch.rand(1, 1, 3, 4, generator=gen) < 0.5
    rect[0, 0, 0, :] = False
    return [
        _case("basic", 1, 2, 4, 4, 3, 3, seed=1),
        _case("cross_dv_scale", 1, 1, 3, 5, 3, 4, seed=5, scale=0.3),
        _case("causal", 1, 1, 5, 5, 3, 2, seed=9, causal=True),
        _case("causal_tq_lt_tk", 1, 1, 2, 4, 3, 3, seed=13, causal=True),
        _case("causal_tq_gt_tk", 1, 1, 4, 2, 3, 3, seed=17, causal=True),  # rows 0, 1 see no key
        _case("padding", 2, 1, 3, 4, 3, 2, seed=21, mask=pad.reshape(2, 1, 1, 4)),
        _case("mask_full_causal", 1, 2, 3, 5, 2, 3, seed=25, mask=full, causal=True),
        _case("mask_2d", 2, 1, 3, 4, 3, 3, seed=29, mask=rect),
    ]


def generate():
    common.dump("attention", {"cases": _cases()})
