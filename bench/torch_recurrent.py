"""PyTorch's side of bench/recurrent_bench.cpp: nn.LSTM / nn.GRU (batch_first,
f32) forward + backward of the output sequence per iteration, grads cleared
each iteration as on kiln's side."""
import torch

from torch_util import emit, seconds_per_call


def _bench(cls):
    def run(name, reps):
        torch.manual_seed(0)
        layer = cls(64, 128, batch_first=True)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(32, 64, 64, generator=g).requires_grad_()
        gy = torch.randn(32, 64, 128, generator=g)

        def step():
            layer(x)[0].backward(gy)
            layer.zero_grad(set_to_none=True)
            x.grad = None

        emit(name, "time", "us/iter", seconds_per_call(step, reps, 0.3) * 1e6)
    return run


def benches():
    return [("lstm_b32t64i64h128", _bench(torch.nn.LSTM)), ("gru_b32t64i64h128", _bench(torch.nn.GRU))]
