"""PyTorch's side of bench/train_lstm_bench.cpp: nn.LSTM(64 -> 256,
batch_first), x [32, 64, 64] randn, Linear(256 -> 1) on every output, MSE
against a randn target [32, 64, 1], Adam (lr 1e-3); one full training step per
call (forward, loss, backward, optimizer step, zero grad)."""
import torch

from torch_util import MemoryProbe, run_workload, update

B, T, I, H = 32, 64, 64, 256


def _lstm(name, reps):
    mem = MemoryProbe()
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(I, H, batch_first=True)
    head = torch.nn.Linear(H, 1)
    opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, T, I, generator=g)
    y = torch.randn(B, T, 1, generator=g)
    loss_fn = torch.nn.functional.mse_loss

    def step():
        update(loss_fn(head(lstm(x)[0]), y), opt)

    # bench/bench.h's convention (see train_lstm_bench.cpp): forward, weight
    # grads, input grads of the recurrent GEMM and the head, none for x.
    flops = 2.0 * B * T * (2 * I * 4 * H + 3 * H * 4 * H + 3 * H)
    run_workload(name, reps, step, mem, unit="sequences/s", items_per_step=B, flops_per_step=flops)


def benches():
    return [("lstm", _lstm)]
