"""PyTorch's side of bench/dit_bench.cpp (dit_b64): the Fashion-MNIST DiT as
facebookresearch/DiT models.py writes it (timm-style attention with a qkv
Linear, adaLN-Zero blocks, tanh-GELU MLP 4x, zero-initialised final layer,
fixed 2-D sincos position embedding), D 128, 6 blocks, 4 heads, patch 4 on
28x28x1 images, 10 classes + the null class, trained by one flow-matching
step per call: t ~ U(0, 1) and noise drawn each step, x_t = (1 - t) x0 + t x1,
MSE to x1 - x0, AdamW lr 1e-4 without weight decay, batch 64."""
import contextlib
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_util import MemoryProbe, bf16_autocast, run_workload, update

IMG, C, P, D, DEPTH, HEADS, K, FREQ = 28, 1, 4, 128, 6, 4, 10, 256
N = (IMG // P) ** 2


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(0, half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def sincos_2d(dim, g):
    def one(d, pos):
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)
    grid = np.stack(np.meshgrid(np.arange(g, dtype=np.float64), np.arange(g, dtype=np.float64)), axis=0)
    return np.concatenate([one(dim // 2, grid[0]), one(dim // 2, grid[1])], axis=1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x):
        B, T, _ = x.shape
        qkv = self.qkv(x).reshape(B, T, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = (q @ k.transpose(-2, -1)) * (D // HEADS) ** -0.5
        return self.proj((att.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(D, elementwise_affine=False, eps=1e-6)
        self.attn = Attention()
        self.norm2 = nn.LayerNorm(D, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"), nn.Linear(4 * D, D))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(D, 6 * D))

    def forward(self, x, c):
        m = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + m[2].unsqueeze(1) * self.attn(modulate(self.norm1(x), m[0], m[1]))
        return x + m[5].unsqueeze(1) * self.mlp(modulate(self.norm2(x), m[3], m[4]))


class DiT(nn.Module):
    def __init__(self):
        super().__init__()
        self.x_embedder = nn.Conv2d(C, D, P, stride=P)
        self.t_embedder = nn.Sequential(nn.Linear(FREQ, D), nn.SiLU(), nn.Linear(D, D))
        self.y_embedder = nn.Embedding(K + 1, D)
        self.register_buffer("pos_embed", torch.from_numpy(sincos_2d(D, IMG // P)).float().unsqueeze(0))
        self.blocks = nn.ModuleList([Block() for _ in range(DEPTH)])
        self.norm_final = nn.LayerNorm(D, elementwise_affine=False, eps=1e-6)
        self.final_linear = nn.Linear(D, P * P * C)
        self.final_adaLN = nn.Sequential(nn.SiLU(), nn.Linear(D, 2 * D))
        for b in self.blocks:
            nn.init.zeros_(b.adaLN_modulation[-1].weight)
            nn.init.zeros_(b.adaLN_modulation[-1].bias)
        for m in (self.final_linear, self.final_adaLN[-1]):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x, t, y):
        h = self.x_embedder(x).flatten(2).transpose(1, 2) + self.pos_embed
        c = self.t_embedder(timestep_embedding(t * 1000.0, FREQ)) + self.y_embedder(y)
        for b in self.blocks:
            h = b(h, c)
        shift, scale = self.final_adaLN(c).chunk(2, dim=1)
        h = self.final_linear(modulate(self.norm_final(h), shift, scale))
        g = IMG // P
        h = torch.einsum("nhwpqc->nchpwq", h.reshape(h.shape[0], g, g, P, P, C))
        return h.reshape(h.shape[0], C, IMG, IMG)


def dit_step_flops(B):
    """bench/dit_bench.cpp's dit_step_flops for the same config."""
    block = N * 12 * D * D + 2 * N * N * D + 6 * D * D
    per_image = DEPTH * block + 2 * N * D * P * P * C + 2 * D * D + FREQ * D + D * D
    return 2.0 * 3.0 * B * per_image


def _dit(batch, bf16=False):
    def run(name, reps):
        mem = MemoryProbe()
        torch.manual_seed(0)
        model = DiT()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
        g = torch.Generator().manual_seed(3)
        x1 = torch.rand(batch, C, IMG, IMG, generator=g) * 2 - 1
        y = torch.randint(0, K, (batch,), generator=g)

        # dit_b64_bf16: f32, or bf16 autocast under torch_bench.py --autocast bf16
        # (forward and loss; the optimizer on the f32 weights).
        autocast = bf16_autocast() if bf16 else contextlib.nullcontext()

        def step():
            drop = torch.rand(batch) < 0.1
            yd = torch.where(drop, torch.full_like(y, K), y)
            t = torch.rand(batch)
            x0 = torch.randn_like(x1)
            xt = (1 - t[:, None, None, None]) * x0 + t[:, None, None, None] * x1
            with autocast:
                loss = F.mse_loss(model(xt, t, yd).float(), x1 - x0)
            update(loss, opt)

        run_workload(name, reps, step, mem, unit="images/s", items_per_step=batch,
                     flops_per_step=dit_step_flops(batch))
    return run


def benches():
    return [("dit_b64", _dit(64)), ("dit_b64_bf16", _dit(64, bf16=True))]
