"""Goldens for kiln's flow matching and DiT (tests/models/dit_test.cpp).

A plain PyTorch re-implementation of facebookresearch/DiT models.py
(timestep_embedding, TimestepEmbedder, LabelEmbedder, DiTBlock with
adaLN-Zero, FinalLayer, get_2d_sincos_pos_embed, unpatchify), written here
in f64 from the paper's code, fed weights in kiln's state-dict names
(DiT's attn.qkv / attn.proj / mlp.fc1 / mlp.fc2 / adaLN_modulation.1 are
kiln's attn.in_proj_* / attn.out_proj.* / mlp.0 / mlp.2 / adaLN_modulation.1).

Files:
  flow_time_embedding.json: DiT's timestep_embedding of t * 1000 (kiln's time
    scale) for dims 8, 7 (odd: a zero column) and 256, evaluated in f64: DiT
    itself runs it in f32, whose phase error at step 1000 is ~1e-4 rad.
  flow_dit.json: a small DiT (8x8x2 images, patch 2, D 8, 2 heads, depth 2,
    mlp_ratio 2, 3 classes + the null class, frequency_dim 16) with every weight random
    (the zero-initialised modulations too, so every path carries gradient):
    output for x, t, y, and the gradients of sum(out * c) for x and every
    parameter; the learned position embedding variant with the gradients of
    x and pos_embed only (the file stays small).
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

from goldens import common

TIME_SCALE = 1000.0


def timestep_embedding(t, dim, max_period=10000):
    """DiT's timestep_embedding (cos first), in t's dtype."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=t.dtype) / half)
    args = t[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


def sincos_1d(dim, pos):
    omega = np.arange(dim // 2, dtype=np.float64) / (dim / 2.0)
    omega = 1.0 / 10000 ** omega
    out = np.einsum("m,d->md", pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def sincos_2d(dim, grid_size):
    """get_2d_sincos_pos_embed: [grid_size^2, dim]."""
    grid_h = np.arange(grid_size, dtype=np.float64)
    grid_w = np.arange(grid_size, dtype=np.float64)
    grid = np.stack(np.meshgrid(grid_w, grid_h), axis=0).reshape([2, 1, grid_size, grid_size])
    emb_h = sincos_1d(dim // 2, grid[0])
    emb_w = sincos_1d(dim // 2, grid[1])
    return np.concatenate([emb_h, emb_w], axis=1)


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


# The small DiT of the golden.
B, C, S, P, D, H, L, K, FD = 3, 2, 8, 2, 8, 2, 2, 3, 16
MLP_RATIO = 2
MLP = MLP_RATIO * D
N = (S // P) ** 2


def make_params(seed, learned_pos):
    g = common.gen(seed)

    def r(*shape, scale=0.2):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    p = {"x_embedder.proj.weight": r(D, C, P, P), "x_embedder.proj.bias": r(D),
         "t_embedder.mlp.0.weight": r(D, FD), "t_embedder.mlp.0.bias": r(D),
         "t_embedder.mlp.2.weight": r(D, D), "t_embedder.mlp.2.bias": r(D),
         "y_embedder.embedding_table.weight": r(K + 1, D, scale=1.0)}
    if learned_pos:
        p["pos_embed"] = r(1, N, D)
    for i in range(L):
        b = f"blocks.{i}."
        p[b + "attn.in_proj_weight"] = r(3 * D, D, scale=0.3)
        p[b + "attn.in_proj_bias"] = r(3 * D)
        p[b + "attn.out_proj.weight"] = r(D, D)
        p[b + "attn.out_proj.bias"] = r(D)
        p[b + "mlp.0.weight"] = r(MLP, D)
        p[b + "mlp.0.bias"] = r(MLP)
        p[b + "mlp.2.weight"] = r(D, MLP)
        p[b + "mlp.2.bias"] = r(D)
        p[b + "adaLN_modulation.1.weight"] = r(6 * D, D)
        p[b + "adaLN_modulation.1.bias"] = r(6 * D)
    p["final_layer.linear.weight"] = r(P * P * C, D)
    p["final_layer.linear.bias"] = r(P * P * C)
    p["final_layer.adaLN_modulation.1.weight"] = r(2 * D, D)
    p["final_layer.adaLN_modulation.1.bias"] = r(2 * D)
    return p


def attention(x, w_qkv, b_qkv, w_o, b_o):
    """timm's Attention as DiT uses it (qkv_bias=True), bidirectional."""
    Bx, Nx, Dx = x.shape
    qkv = F.linear(x, w_qkv, b_qkv).reshape(Bx, Nx, 3, H, Dx // H).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    att = (q @ k.transpose(-2, -1)) * (Dx // H) ** -0.5
    y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(Bx, Nx, Dx)
    return F.linear(y, w_o, b_o)


def dit_forward(p, x, t, y, pos):
    """DiT.forward(x, t, y) with t in [0, 1] (times TIME_SCALE)."""
    h = F.conv2d(x, p["x_embedder.proj.weight"], p["x_embedder.proj.bias"], stride=P).flatten(2).transpose(1, 2)
    h = h + pos
    te = timestep_embedding(t * TIME_SCALE, FD)
    te = F.linear(F.silu(F.linear(te, p["t_embedder.mlp.0.weight"], p["t_embedder.mlp.0.bias"])),
                  p["t_embedder.mlp.2.weight"], p["t_embedder.mlp.2.bias"])
    c = te + p["y_embedder.embedding_table.weight"][y]
    for i in range(L):
        b = f"blocks.{i}."
        m = F.linear(F.silu(c), p[b + "adaLN_modulation.1.weight"], p[b + "adaLN_modulation.1.bias"]).chunk(6, dim=1)
        a = modulate(F.layer_norm(h, (D,), eps=1e-6), m[0], m[1])
        h = h + m[2].unsqueeze(1) * attention(a, p[b + "attn.in_proj_weight"], p[b + "attn.in_proj_bias"],
                                              p[b + "attn.out_proj.weight"], p[b + "attn.out_proj.bias"])
        a = modulate(F.layer_norm(h, (D,), eps=1e-6), m[3], m[4])
        f = F.linear(F.gelu(F.linear(a, p[b + "mlp.0.weight"], p[b + "mlp.0.bias"]), approximate="tanh"),
                     p[b + "mlp.2.weight"], p[b + "mlp.2.bias"])
        h = h + m[5].unsqueeze(1) * f
    shift, scale = F.linear(F.silu(c), p["final_layer.adaLN_modulation.1.weight"],
                            p["final_layer.adaLN_modulation.1.bias"]).chunk(2, dim=1)
    h = F.linear(modulate(F.layer_norm(h, (D,), eps=1e-6), shift, scale), p["final_layer.linear.weight"],
                 p["final_layer.linear.bias"])
    # unpatchify: [B, N, p*p*C] -> [B, C, H, W]
    g = S // P
    h = h.reshape(h.shape[0], g, g, P, P, C)
    h = torch.einsum("nhwpqc->nchpwq", h)
    return h.reshape(h.shape[0], C, g * P, g * P)


def dit_case(seed, learned_pos):
    p = {k: v.requires_grad_() for k, v in make_params(seed, learned_pos).items()}
    g = common.gen(seed + 100)
    x = torch.randn(B, C, S, S, generator=g, dtype=torch.float64).requires_grad_()
    t = torch.tensor([0.0, 0.37, 0.9], dtype=torch.float64)
    y = torch.tensor([2, 0, K], dtype=torch.int64)  # K: the null class
    pos = p["pos_embed"] if learned_pos else torch.from_numpy(sincos_2d(D, S // P)).unsqueeze(0)
    out = dit_forward(p, x, t, y, pos)
    cw = torch.randn(out.shape, generator=g, dtype=torch.float64)
    (out * cw).sum().backward()
    state = {k: common.t(v) for k, v in p.items()}
    if not learned_pos:
        state["pos_embed"] = common.t(pos)
    return {"learned_pos": learned_pos, "state": state, "x": common.t(x), "t": common.t(t), "y": common.t(y),
            "out": common.t(out), "c": common.t(cw), "grad_x": common.t(x.grad),
            "grads": {k: common.t(v.grad) for k, v in p.items() if not learned_pos or k == "pos_embed"}}


def generate():
    # Dyadic times, exact in f32 too: the f32 test then sees only the output's rounding.
    ts = torch.tensor([0.0, 2.0 ** -10, 0.25, 0.5, 187 / 256, 1023 / 1024, 1.0], dtype=torch.float64)
    cases = []
    for dim in (8, 7, 256):
        cases.append({"dim": dim, "t": common.t(ts), "out": common.t(timestep_embedding(ts * TIME_SCALE, dim))})
    common.dump("flow_time_embedding", {"time_scale": TIME_SCALE, "max_period": 10000, "cases": cases})
    common.dump("flow_dit", {"config": {"image_size": S, "in_channels": C, "patch_size": P, "hidden_size": D,
                                        "num_heads": H, "depth": L, "mlp_ratio": MLP_RATIO, "num_classes": K,
                                        "frequency_dim": FD},
                             "cases": [dit_case(1, False), dit_case(2, True)]})
