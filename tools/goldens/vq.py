"""Goldens for kiln/nn/vq.h, from a PyTorch re-implementation written here of
the EMA Euclidean codebook (decay 0.99, eps 1e-5, Laplace-smoothed cluster
sizes; the recipe of VQ-VAE-2 / Sonnet's VectorQuantizerEMA) and of residual
VQ. Dead-code re-init is off in these cases (its rows are drawn from kiln's
generator; tests/nn/vq_test.cpp checks it by its properties).

vq.json:
  "ema": {"K", "D", "decay", "eps", "beta", "codebook0", "steps": [{"z", "indices",
          "loss", "cluster_size", "embed_sum", "codebook"}]}  five steps, f32
  "rvq": {"L", "K", "D", "codebooks": [...], "z", "indices", "quantized", "loss",
          "after": [codebook per level after one ema_update]}"""
import torch

from . import common

DECAY, EPS, BETA = 0.99, 1e-5, 0.25


def nearest(codebook, z):
    """argmin_k ||c_k||^2 - 2 z.c_k: z [N, D] -> i64 [N] (ties: lowest k)."""
    d = torch.addmm((codebook * codebook).sum(1)[None, :], z, codebook.t(), beta=1, alpha=-2)
    return d.argmin(1)


class EmaCodebook:
    """The buffers and the update of one codebook."""

    def __init__(self, codebook):
        self.codebook = codebook.clone()
        self.cluster_size = torch.ones(codebook.shape[0], dtype=codebook.dtype)
        self.embed_sum = codebook.clone()

    def update(self, z, idx):
        K, D = self.codebook.shape
        counts = torch.zeros(K, dtype=z.dtype).index_add(0, idx, torch.ones(z.shape[0], dtype=z.dtype))
        sums = torch.zeros(K, D, dtype=z.dtype).index_add(0, idx, z)
        self.cluster_size = self.cluster_size * DECAY + counts * (1 - DECAY)
        self.embed_sum = self.embed_sum * DECAY + sums * (1 - DECAY)
        total = self.cluster_size.sum()
        smoothed = (self.cluster_size + EPS) / (total + K * EPS) * total
        self.codebook = self.embed_sum / smoothed[:, None]


def _ema_case():
    K, D, N = 8, 4, 32
    cb = EmaCodebook(common.randn(K, D, seed=1).float())
    out = {"K": K, "D": D, "decay": DECAY, "eps": EPS, "beta": BETA, "codebook0": common.t(cb.codebook), "steps": []}
    for step in range(5):
        z = (common.randn(N, D, seed=10 + step) * 1.5).float()
        idx = nearest(cb.codebook, z)
        loss = BETA * ((z - cb.codebook[idx]) ** 2).mean()
        cb.update(z, idx)
        out["steps"].append({"z": common.t(z), "indices": common.t(idx), "loss": float(loss),
                             "cluster_size": common.t(cb.cluster_size), "embed_sum": common.t(cb.embed_sum),
                             "codebook": common.t(cb.codebook)})
    return out


def _rvq_case():
    L, K, D, N = 3, 8, 4, 32
    books = [EmaCodebook((common.randn(K, D, seed=20 + q) * (0.5 ** q)).float()) for q in range(L)]
    z = common.randn(N, D, seed=30).float()
    residual, total, idx, residuals = z, None, [], []
    for b in books:
        i = nearest(b.codebook, residual)
        c = b.codebook[i]
        total = c if total is None else total + c
        residuals.append(residual)
        residual = residual - c
        idx.append(i)
    loss = BETA * ((z - total) ** 2).mean()
    out = {"L": L, "K": K, "D": D, "codebooks": [common.t(b.codebook) for b in books], "z": common.t(z),
           "indices": common.t(torch.stack(idx, 1)), "quantized": common.t(total), "loss": float(loss)}
    for b, r, i in zip(books, residuals, idx):
        b.update(r, i)
    out["after"] = [common.t(b.codebook) for b in books]
    return out


def generate():
    common.dump("vq", {"ema": _ema_case(), "rvq": _rvq_case()})
