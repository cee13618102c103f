#!/usr/bin/env python3
"""The VQ-VAE recipe of `kiln train vqvae fashion-mnist` in PyTorch 1.13, for
the end-to-end comparison in docs/vq.md: the same model (conv encoder
28x28 -> 7x7x64, EMA vector quantizer or residual VQ, transposed-conv
decoder), loss MSE + 0.25 commitment, Adam lr 1e-3, batch 128, pixels in
[0, 1], the same EMA codebook (decay 0.99, eps 1e-5), dead-code re-init by
token share, highest-norm init from the first batch.

    /usr/bin/python3 tools/vqvae_reference.py --epochs 5 --codebook-size 256 --threads 2
    /usr/bin/python3 tools/vqvae_reference.py --epochs 5 --levels 4

Prints one line per epoch (train seconds, test MSE per pixel, test code usage
and perplexity) and a final JSON line with the same figures.
"""
import argparse
import gzip
import json
import math
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    _, _, _, ndim = struct.unpack(">BBBB", data[:4])
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(root, split, limit):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))
    if limit:
        x = x[:limit]
    return torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)  # [N, 1, 28, 28] in [0, 1]


class EmaQuantizer(nn.Module):
    """Codebook [K, D] as buffers; nearest code by one matmul; STE; EMA update."""

    def __init__(self, K, D, beta=0.25, decay=0.99, eps=1e-5, threshold=1e-3, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        cb = torch.randn(K, D, generator=g)
        self.register_buffer("codebook", cb)
        self.register_buffer("cluster_size", torch.ones(K))
        self.register_buffer("embed_sum", cb.clone())
        self.register_buffer("initialized", torch.zeros((), dtype=torch.long))
        self.K, self.beta, self.decay, self.eps, self.threshold = K, beta, decay, eps, threshold
        self.gen = torch.Generator().manual_seed(seed + 1)

    @torch.no_grad()
    def seed_highest_norm(self, z):
        norms = (z.double() ** 2).sum(1)
        order = torch.sort(-norms, stable=True).indices[: self.K]  # ties: lower row first
        self.codebook.copy_(z[order])
        self.embed_sum.copy_(z[order])
        self.cluster_size.fill_(1)
        self.initialized.fill_(1)

    @torch.no_grad()
    def nearest(self, z):
        d = torch.addmm((self.codebook ** 2).sum(1)[None], z, self.codebook.t(), beta=1, alpha=-2)
        return d.argmin(1)

    def quantize(self, z, seed):
        """z [N, D] (detached) -> idx [N], codes [N, D]."""
        if seed and self.initialized.item() == 0:
            self.seed_highest_norm(z)
        idx = self.nearest(z)
        return idx, self.codebook[idx]

    @torch.no_grad()
    def ema_update(self, z, idx):
        K, D = self.codebook.shape
        counts = torch.zeros(K).index_add(0, idx, torch.ones(z.shape[0]))
        sums = torch.zeros(K, D).index_add(0, idx, z)
        cs = self.cluster_size * self.decay + counts * (1 - self.decay)
        es = self.embed_sum * self.decay + sums * (1 - self.decay)
        total = cs.sum()
        cb = es / ((cs + self.eps) / (total + K * self.eps) * total)[:, None]
        if self.threshold > 0:
            dead = (cs < self.threshold * total).nonzero().flatten()
            n = dead.numel()
            if n:
                N = z.shape[0]
                rows = torch.randperm(N, generator=self.gen)[:n] if n <= N else torch.randint(N, (n,), generator=self.gen)
                share = total / K
                cb[dead] = z[rows]
                cs[dead] = share
                es[dead] = z[rows] * share
        self.cluster_size.copy_(cs)
        self.embed_sum.copy_(es)
        self.codebook.copy_(cb)


class VQVAE(nn.Module):
    def __init__(self, K=256, D=64, hidden=32, levels=1, seed=0, **vq):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(1, hidden, 4, 2, 1), nn.ReLU(), nn.Conv2d(hidden, D, 4, 2, 1), nn.ReLU(),
                                     nn.Conv2d(D, D, 3, 1, 1))
        self.levels = nn.ModuleList([EmaQuantizer(K, D, seed=seed + q, **vq) for q in range(levels)])
        self.decoder = nn.Sequential(nn.Conv2d(D, D, 3, 1, 1), nn.ReLU(), nn.ConvTranspose2d(D, hidden, 4, 2, 1), nn.ReLU(),
                                     nn.ConvTranspose2d(hidden, 1, 4, 2, 1))
        self.beta = vq.get("beta", 0.25)

    def forward(self, x):
        z = self.encoder(x).permute(0, 2, 3, 1)  # [B, 7, 7, D]
        zf = z.reshape(-1, z.shape[-1])
        residual, total, idx = zf.detach(), None, []
        for q in self.levels:
            i, c = q.quantize(residual, self.training)
            total = c if total is None else total + c
            residual = residual - c
            idx.append(i)
        commitment = self.beta * F.mse_loss(zf, total)
        zq = zf + (total - zf).detach()  # straight-through
        recon = self.decoder(zq.reshape(z.shape).permute(0, 3, 1, 2))
        return recon, zf.detach(), torch.stack(idx, 1), commitment

    @torch.no_grad()
    def ema_update(self, zf, idx):
        residual = zf
        residuals = []
        for l, q in enumerate(self.levels):
            residuals.append(residual)
            residual = residual - q.codebook[idx[:, l]]
        for l, q in enumerate(self.levels):
            q.ema_update(residuals[l], idx[:, l])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("KILN_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--codebook-size", type=int, default=256)
    ap.add_argument("--levels", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--test-limit", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train_x, test_x = load(a.data, "train", a.limit), load(a.data, "test", a.test_limit)
    model = VQVAE(K=a.codebook_size, levels=a.levels, seed=a.seed)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    g = torch.Generator().manual_seed(a.seed)
    result = {}
    for epoch in range(1, a.epochs + 1):
        model.train()
        t0 = time.perf_counter()
        perm = torch.randperm(train_x.shape[0], generator=g)
        for s in range(0, train_x.shape[0], a.batch_size):
            x = train_x[perm[s:s + a.batch_size]]
            recon, zf, idx, commitment = model(x)
            loss = F.mse_loss(recon, x) + commitment
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            model.ema_update(zf, idx)
        seconds = time.perf_counter() - t0
        model.eval()
        se, hist = 0.0, torch.zeros(a.codebook_size)
        with torch.no_grad():
            for s in range(0, test_x.shape[0], 500):
                x = test_x[s:s + 500]
                recon, _, idx, _ = model(x)
                se += F.mse_loss(recon, x, reduction="sum").item()
                hist += torch.bincount(idx[:, 0], minlength=a.codebook_size).float()
        mse = se / test_x.numel()
        p = hist / hist.sum()
        usage = float((hist > 0).float().mean())
        perplexity = math.exp(-float((p[p > 0] * p[p > 0].log()).sum()))
        result = {"epoch": epoch, "epoch_seconds": seconds, "test_mse": mse, "test_usage": usage,
                  "test_perplexity": perplexity, "levels": a.levels, "codebook_size": a.codebook_size}
        print(f"epoch {epoch}: {seconds:.1f}s · test mse {mse:.5f} · usage {usage:.3f} · perplexity {perplexity:.1f}",
              flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
