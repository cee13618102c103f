"""PyTorch's side of bench/train_mamba_bench.cpp (mamba_lm): the same byte
model as kiln's models::MambaLM (embedding 256 x 128, 4 blocks of
x + Mamba3(RMSNorm(x)), final RMSNorm, a 128 -> 256 head without bias;
Mamba3 with d_state 64, expand 2, headdim 32, rope fraction 0.5), batch 12 of
64 random bytes and targets, AdamW lr 1e-3 betas (0.9, 0.99), weight decay
0.1 on the 2-D parameters only. The scan is upstream's mamba3_siso_fwd_ref
form (one masked T x T matrix per head, no Python loop over time), batched
(the fastest way to run it in plain PyTorch on the CPU)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_util import MemoryProbe, run_workload, update

D_MODEL, LAYERS, D_STATE, EXPAND, HEADDIM = 128, 4, 64, 2, 32


def rot(x, cos, sin):
    R = cos.shape[-1]
    x0, x1 = x[..., 0:2 * R:2], x[..., 1:2 * R:2]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)
    return torch.cat((out, x[..., 2 * R:]), -1)


def scan(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z):
    """q, k [B, T, H, N]; v, z [B, T, H, P]; adt, dt, trap [B, T, H]; angles [B, T, H, R] -> y [B, T, H, P]."""
    T = q.shape[1]
    sg = torch.sigmoid(trap)
    cum = torch.cumsum(torch.tanh(angles) * math.pi * dt[..., None], 1)
    cum = cum - 2 * math.pi * torch.floor(cum / (2 * math.pi)).detach()
    dt_next = F.pad(dt[:, 1:], (0, 0, 0, 1))
    sg_next = F.pad(sg[:, 1:], (0, 0, 0, 1))
    shifted = dt_next * (1 - sg_next)
    scale = dt * sg + shifted
    qb, kb = q + q_bias, k + k_bias
    qk_dot = (qb * kb).sum(-1) * shifted
    c, s = torch.cos(cum), torch.sin(cum)
    qr, kr = rot(qb, c, s), rot(kb, c, s)
    ks = kr * scale[..., None]
    cs = torch.cumsum(adt, 1)                                   # [B, T, H]
    seg = (cs[:, :, None, :] - cs[:, None, :, :]).permute(0, 3, 1, 2)   # [B, H, t, s]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    decay = torch.exp(seg.masked_fill(~mask, float("-inf")))
    scores = torch.einsum("bthn,bshn->bhts", qr, ks) * decay
    out = torch.einsum("bhts,bshp->bthp", scores, v)
    out = out + D[None, None, :, None] * v - v * qk_dot[..., None]
    return out * F.silu(z)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


class Mamba3(nn.Module):
    def __init__(self, d_model, d_state, expand, headdim, dt_min=1e-3, dt_max=0.1):
        super().__init__()
        self.di = expand * d_model
        self.h, self.p, self.n = self.di // headdim, headdim, d_state
        self.r = (d_state // 2 - (d_state // 2) % 2) // 2
        self.in_proj = nn.Linear(d_model, 2 * self.di + 2 * d_state + 3 * self.h + self.r, bias=False)
        dt = torch.exp(torch.rand(self.h) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.B_bias = nn.Parameter(torch.ones(self.h, d_state))
        self.C_bias = nn.Parameter(torch.ones(self.h, d_state))
        self.B_norm = RMSNorm(d_state, 1e-5)
        self.C_norm = RMSNorm(d_state, 1e-5)
        self.D = nn.Parameter(torch.ones(self.h))
        self.out_proj = nn.Linear(self.di, d_model, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        H, P, N, R = self.h, self.p, self.n, self.r
        z, xs, Bm, Cm, dd_dt, dd_A, trap, ang = torch.split(
            self.in_proj(x), [self.di, self.di, N, N, H, H, H, R], dim=-1)
        A = -torch.clamp(torch.where(dd_A >= 0, 1 + dd_A, 1 / (1 - dd_A)), min=1e-4)
        dt = F.softplus(dd_dt + self.dt_bias)
        q = self.C_norm(Cm)[:, :, None, :].expand(B, T, H, N)
        k = self.B_norm(Bm)[:, :, None, :].expand(B, T, H, N)
        y = scan(q, k, xs.reshape(B, T, H, P), A * dt, dt, trap, self.C_bias, self.B_bias,
                 ang[:, :, None, :].expand(B, T, H, R), self.D, z.reshape(B, T, H, P))
        return self.out_proj(y.reshape(B, T, self.di))


class MambaLM(nn.Module):
    def __init__(self, d_model=D_MODEL, n_layer=LAYERS, d_state=D_STATE, expand=EXPAND, headdim=HEADDIM):
        super().__init__()
        self.embed = nn.Embedding(256, d_model)
        self.norms = nn.ModuleList([RMSNorm(d_model, 1e-5) for _ in range(n_layer)])
        self.mixers = nn.ModuleList([Mamba3(d_model, d_state, expand, headdim) for _ in range(n_layer)])
        self.norm_f = RMSNorm(d_model, 1e-5)
        self.head = nn.Linear(d_model, 256, bias=False)

    def forward(self, idx, targets):
        x = self.embed(idx)
        for norm, mixer in zip(self.norms, self.mixers):
            x = x + mixer(norm(x))
        logits = self.head(self.norm_f(x))
        return F.cross_entropy(logits.view(-1, 256), targets.view(-1))


def _mamba(batch, context):
    def run(name, reps):
        mem = MemoryProbe()
        torch.manual_seed(0)
        model = MambaLM()
        params = list(model.parameters())
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))
        g = torch.Generator().manual_seed(1)
        idx = torch.randint(0, 256, (batch, context), generator=g)
        targets = torch.randint(0, 256, (batch, context), generator=g)

        def step():
            update(model(idx, targets), opt)

        run_workload(name, reps, step, mem, unit="tokens/s", items_per_step=batch * context)
    return run


def benches():
    return [("mamba_lm", _mamba(12, 64))]
