"""Parity goldens for RNN, GRU, LSTM (batch_first) and their cells.

Small shapes (B=3, T=3, I=3, H=2) keep the file small. The length-masked
cases have no PyTorch layer to compare with, so their reference runs torch
on each sequence alone, x[b, :len] from its own initial state: outputs past
len are zero, the state is the one reached at len, len 0 keeps the initial
state. Inputs and parameter gradients of that reference are recorded too.
"""
import numpy as np
import torch

from goldens import common
from goldens.nn_util import parity_case

B, T, I, H = 3, 3, 3, 2


def masked_forward(is_lstm):
    def fwd(m, x, lengths, *state):
        outs, hs, cs = [], [], []
        for b in range(x.shape[0]):
            n = int(lengths[b])
            st = tuple(s[:, b:b + 1] for s in state)
            st = (st if is_lstm else st[0]) if state else None
            if n == 0:
                o = x.new_zeros(1, x.shape[1], H)
                if st is None:
                    z = x.new_zeros(m.num_layers, 1, H)
                    st = (z, z) if is_lstm else z
                s = st
            else:
                o, s = m(x[b:b + 1, :n], st)
                o = torch.cat([o, o.new_zeros(1, x.shape[1] - n, H)], 1)
            outs.append(o)
            hs.append(s[0] if is_lstm else s)
            if is_lstm:
                cs.append(s[1])
        res = (torch.cat(outs, 0), torch.cat(hs, 1))
        return res + ((torch.cat(cs, 1),) if is_lstm else ())
    return fwd


def shorten(obj):
    """f32 tensors written with the shortest decimal that reads back as the
    same f32 (common.t prints the f64 expansion): a smaller file, same values."""
    if isinstance(obj, dict):
        if obj.get("dtype") == "f32" and "data" in obj:
            obj["data"] = [float(repr(np.float32(v))) if isinstance(v, float) else v for v in obj["data"]]
            return obj
        return {k: shorten(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shorten(v) for v in obj]
    return obj


def generate():
    torch.manual_seed(0)
    x = common.randn(B, T, I, seed=1).float()
    h1 = common.randn(1, B, H, seed=2).float()
    h2 = common.randn(2, B, H, seed=3).float()
    c2 = common.randn(2, B, H, seed=4).float()
    c1 = common.randn(1, B, H, seed=5).float()
    lengths = torch.tensor([3, 0, 2])
    nn = torch.nn
    cases = [
        parity_case("rnn_tanh", nn.RNN(I, H, batch_first=True), [x]),
        parity_case("rnn_relu_2layers_state", nn.RNN(I, H, 2, nonlinearity="relu", batch_first=True), [x, h2],
                    forward=lambda m, x, h: m(x, h)),
        parity_case("gru", nn.GRU(I, H, batch_first=True), [x]),
        parity_case("gru_2layers_state", nn.GRU(I, H, 2, batch_first=True), [x, h2],
                    forward=lambda m, x, h: m(x, h)),
        parity_case("lstm", nn.LSTM(I, H, batch_first=True), [x]),
        parity_case("lstm_2layers_state", nn.LSTM(I, H, 2, batch_first=True), [x, h2, c2],
                    forward=lambda m, x, h, c: m(x, (h, c))),
        parity_case("lstm_nobias", nn.LSTM(I, H, bias=False, batch_first=True), [x]),
        # lengths: [x, lengths, state...]
        parity_case("rnn_lengths", nn.RNN(I, H, batch_first=True), [x, lengths], forward=masked_forward(False)),
        parity_case("gru_lengths_state", nn.GRU(I, H, batch_first=True), [x, lengths, h1],
                    forward=masked_forward(False)),
        parity_case("lstm_2layers_lengths_state", nn.LSTM(I, H, 2, batch_first=True), [x, lengths, h2, c2],
                    forward=masked_forward(True)),
        parity_case("lstm_lengths", nn.LSTM(I, H, batch_first=True), [x, lengths], forward=masked_forward(True)),
        # cells: one step from a given state, then a second step from the result
        parity_case("rnn_cell_relu", nn.RNNCell(I, H, nonlinearity="relu"), [x[:, 0], x[:, 1], h1[0]],
                    forward=lambda m, a, b, h: m(b, m(a, h))),
        parity_case("gru_cell", nn.GRUCell(I, H), [x[:, 0], x[:, 1], h1[0]],
                    forward=lambda m, a, b, h: m(b, m(a, h))),
        parity_case("lstm_cell", nn.LSTMCell(I, H), [x[:, 0], x[:, 1], h1[0], c1[0]],
                    forward=lambda m, a, b, h, c: m(b, m(a, (h, c)))),
    ]
    common.dump("nn_recurrent", {"cases": shorten(cases)})
