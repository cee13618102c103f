"""PyTorch's side of bench/train_mlp_bench.cpp: MLP 784-256-256-10 ReLU,
cross-entropy, Adam (lr 1e-3); one full training step per call (forward,
loss, backward, optimizer step, zero grad) on a fixed synthetic batch."""
import torch

from torch_util import MemoryProbe, run_workload, update


def _mlp(batch):
    def run(name, reps):
        mem = MemoryProbe()
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                  torch.nn.ReLU(), torch.nn.Linear(256, 10))
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(batch, 784, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
        loss_fn = torch.nn.functional.cross_entropy

        def step():
            update(loss_fn(net(x), y), opt)

        flops = 2.0 * batch * (2 * (784 * 256 + 256 * 256 + 256 * 10) + 256 * 256 + 256 * 10)
        run_workload(name, reps, step, mem, unit="samples/s", items_per_step=batch, flops_per_step=flops)
    return run


def benches():
    return [("mlp_b64", _mlp(64)), ("mlp_b256", _mlp(256))]
