"""Parity goldens for MultiheadAttention and TransformerBlock (SPECS L14, L17).

kiln's masks are bool with true = allowed; PyTorch's attn_mask / key_padding_mask
are true = NOT allowed, so each case stores kiln's mask (the negation) as an
input. No case has a fully masked row: PyTorch gives NaN there, kiln zeros
(tested directly in tests/nn/attention_test.cpp). AdaLN-Zero has no PyTorch
layer: its golden comes from the hand-written DiT-style reference below.
"""
import torch
import torch.nn.functional as F

from goldens import common
from goldens.nn_util import parity_case

D, H, F_DIM, C = 4, 2, 8, 3


def round_f32(case):
    """f32 values to 6 significant digits: far inside the parity tolerance, and a small file."""
    def fix(t):
        if isinstance(t, dict) and t.get("dtype") == "f32":
            t["data"] = [float(f"{v:.6g}") if isinstance(v, float) else v for v in t["data"]]
        return t
    for key in ("inputs", "outputs", "cotangents", "input_grads"):
        case[key] = [fix(t) for t in case[key]]
    for key in ("state", "param_grads"):
        case[key] = {k: fix(v) for k, v in case[key].items()}
    return case


def randn(*shape, seed):
    return common.randn(*shape, seed=seed).float()


def mha(**kw):
    m = torch.nn.MultiheadAttention(D, H, batch_first=True, **kw)
    with torch.no_grad():  # PyTorch zero-initialises the biases: make them count
        for name, p in m.named_parameters():
            if "bias" in name:
                p.copy_(torch.randn(p.shape) * 0.5)
    return m


def block(**kw):
    return torch.nn.TransformerEncoderLayer(D, H, dim_feedforward=F_DIM, dropout=0.0, activation="gelu",
                                            batch_first=True, norm_first=True, **kw)


class AdaLNBlock(torch.nn.Module):
    """DiT's AdaLN-Zero block written out: norms without affine, the modulation
    Linear(C, 6D) on silu(cond) gives shift/scale/gate for both sublayers."""

    def __init__(self):
        super().__init__()
        self.self_attn = torch.nn.MultiheadAttention(D, H, batch_first=True)
        self.linear1 = torch.nn.Linear(D, F_DIM)
        self.linear2 = torch.nn.Linear(F_DIM, D)
        self.norm1 = torch.nn.LayerNorm(D, elementwise_affine=False)
        self.norm2 = torch.nn.LayerNorm(D, elementwise_affine=False)
        self.adaLN_modulation = torch.nn.Linear(C, 6 * D)  # random here (kiln zero-inits it) so the golden tests it

    def forward(self, x, cond):
        shift1, scale1, gate1, shift2, scale2, gate2 = self.adaLN_modulation(F.silu(cond)).unsqueeze(1).chunk(6, -1)
        h = self.norm1(x) * (1 + scale1) + shift1
        a = self.self_attn(h, h, h, need_weights=False)[0]
        x = x + gate1 * a
        h = self.norm2(x) * (1 + scale2) + shift2
        return x + gate2 * self.linear2(F.gelu(self.linear1(h)))


def generate():
    torch.manual_seed(0)
    B, T, Tq, Tk = 2, 4, 3, 5
    x = randn(B, T, D, seed=1)
    q, k, v = randn(B, Tq, D, seed=2), randn(B, Tk, D, seed=3), randn(B, Tk, D, seed=4)
    pad = torch.tensor([[False] * T, [False, False, True, True]])            # True = padding (PyTorch)
    kpad = torch.tensor([[False] * (Tk - 1) + [True], [False, True, False, True, True]])
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)                     # True = not allowed
    additive = torch.randn(T, T, generator=common.gen(5)).float()
    additive[0, 3] = additive[2, 1] = additive[3, 0] = float("-inf")

    cases = [
        # Self-attention (query = key = value: kiln's one-GEMM path) with a key padding mask.
        parity_case("mha_self_padding", mha(), [x, ~pad],
                    lambda m, x, valid: m(x, x, x, key_padding_mask=~valid, need_weights=False)[0]),
        # Causal self-attention, weights averaged over heads.
        parity_case("mha_self_causal_weights", mha(), [x],
                    lambda m, x: m(x, x, x, attn_mask=causal, need_weights=True, average_attn_weights=True)),
        # Cross-attention (Tq != Tk, distinct key and value), per-head weights, key padding.
        parity_case("mha_cross_per_head", mha(), [q, k, v, ~kpad],
                    lambda m, q, k, v, valid: m(q, k, v, key_padding_mask=~valid, need_weights=True,
                                                average_attn_weights=False)),
        # Cross-attention on one memory (key = value: kiln's k/v GEMM), no bias.
        parity_case("mha_cross_shared_kv_no_bias", torch.nn.MultiheadAttention(D, H, batch_first=True, bias=False),
                    [q, k], lambda m, q, mem: m(q, mem, mem, need_weights=False)[0]),
        # kdim / vdim != D: q_proj_weight, k_proj_weight, v_proj_weight.
        parity_case("mha_kdim_vdim", mha(kdim=5, vdim=7), [q, randn(B, Tk, 5, seed=6), randn(B, Tk, 7, seed=7)],
                    lambda m, q, k, v: m(q, k, v, need_weights=True)),
        # TransformerEncoderLayer(norm_first=True, batch_first=True, gelu, dropout 0).
        parity_case("block", block(), [x], lambda m, x: m(x)),
        parity_case("block_causal", block(), [x], lambda m, x: m(x, src_mask=causal)),
        parity_case("block_padding", block(), [x, ~pad], lambda m, x, valid: m(x, src_key_padding_mask=~valid)),
        # A float mask added to the scores (spec 002's additive-mask variant), with -inf entries.
        parity_case("block_additive", block(), [x, additive], lambda m, x, a: m(x, src_mask=a)),
        # AdaLN-Zero against the reference above (modulation not zero, so it is exercised).
        parity_case("adaln_block", AdaLNBlock(), [x, randn(B, C, seed=8)], lambda m, x, c: m(x, c)),
        # PyTorch's defaults (need_weights=True, averaged over heads), then the per-head weights, which
        # PyTorch needs a second call for; kiln returns all three from one default call. Last, so the
        # cases above keep their random draws.
        parity_case("mha_default_weights_and_heads", mha(), [q, k, v, ~kpad],
                    lambda m, q, k, v, valid: (*m(q, k, v, key_padding_mask=~valid),
                                               m(q, k, v, key_padding_mask=~valid, average_attn_weights=False)[1])),
    ]
    common.dump("nn_attention", {"cases": [round_f32(c) for c in cases]})
