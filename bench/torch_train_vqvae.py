"""PyTorch's side of bench/train_vqvae_bench.cpp (vqvae_b128, vqvae_rvq4_b128):
one step of tools/vqvae_reference.py's recipe (K 256, D 64) on a fixed batch
of 128 uniform [0, 1] images: forward, MSE + commitment, backward, Adam
(lr 1e-3), the codebook's EMA update. epoch_s = 60000 images / throughput."""
import pathlib
import sys

import torch
import torch.nn.functional as F

from torch_util import MemoryProbe, emit, seconds_per_call

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
from vqvae_reference import VQVAE  # noqa: E402


def _vqvae(batch, levels):
    def run(name, reps):
        mem = MemoryProbe()
        torch.manual_seed(0)
        model = VQVAE(K=256, levels=levels)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.rand(batch, 1, 28, 28, generator=torch.Generator().manual_seed(1))

        def step():
            recon, zf, idx, commitment = model(x)
            (F.mse_loss(recon, x) + commitment).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            model.ema_update(zf, idx)

        sec = seconds_per_call(step, reps, 0.5)
        emit(name, "throughput", "samples/s", batch / sec)
        emit(name, "epoch_s", "s", 60000.0 / batch * sec)
        emit(name, "peak_mem", "MB", mem.added_mb())
        emit(name, "peak_rss", "MB", mem.peak_mb())
    return run


def benches():
    return [("vqvae_b128", _vqvae(128, 1)), ("vqvae_rvq4_b128", _vqvae(128, 4))]
