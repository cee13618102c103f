"""PyTorch's side of bench/train_cnn_bench.cpp (cnn_b64): Conv2d(1->32, 3x3,
pad 1)-ReLU-MaxPool2d(2)-Conv2d(32->64, 3x3, pad 1)-ReLU-MaxPool2d(2)-Flatten
-Linear(3136->128)-ReLU-Linear(128->10), cross-entropy, Adam (lr 1e-3), batch
64 of randn [1, 28, 28] images with randint(10) labels; one full training step
per call (forward, loss, backward, optimizer step, zero grad). cnn_b64_bf16 is
the same step, f32 or under bf16 autocast (torch_util.bf16_autocast)."""
import contextlib

import torch

from torch_util import MemoryProbe, bf16_autocast, run_workload, update


def cnn_b64_model():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def cnn_flops_per_sample():
    """Multiply-adds per sample, 2 flops each: conv1 forward + weight grad (the
    input needs no grad); conv2, fc1, fc2 forward + weight grad + input grad."""
    conv1, conv2 = 32 * 28 * 28 * 9, 64 * 14 * 14 * 32 * 9
    fc1, fc2 = 3136 * 128, 128 * 10
    return 2.0 * (2 * conv1 + 3 * (conv2 + fc1 + fc2))


def _cnn(batch, bf16=False):
    def run(name, reps):
        mem = MemoryProbe()
        torch.manual_seed(0)
        net = cnn_b64_model()
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(batch, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
        loss_fn = torch.nn.functional.cross_entropy

        autocast = bf16_autocast() if bf16 else contextlib.nullcontext()

        def step():
            with autocast:
                loss = loss_fn(net(x), y)
            update(loss, opt)

        run_workload(name, reps, step, mem, unit="samples/s", items_per_step=batch,
                     flops_per_step=batch * cnn_flops_per_sample())
    return run


def benches():
    return [("cnn_b64", _cnn(64)),
            # cnn_b64_bf16: f32, or bf16 autocast with torch_bench.py --autocast bf16; bench/run
            # compares kiln's bf16 figure with the better of the two (issue 22).
            ("cnn_b64_bf16", _cnn(64, bf16=True))]
