"""Goldens for ONNX import (tests/models/onnx_model_test.cpp): three small
models exported by torch.onnx.export from PyTorch 1.13, with inputs and
PyTorch's outputs.

  onnx_mlp.onnx   Linear-ReLU-Linear-Tanh-Linear-Sigmoid, opset 11 (Gemm)
  onnx_cnn.onnx   Conv-ReLU-BatchNorm-MaxPool-Conv(stride 2)-ReLU-BatchNorm-
                  AvgPool-AdaptiveAvgPool(1)-Flatten-Linear, opset 13; the
                  BatchNorms follow a ReLU so that the exporter cannot fold them
                  into the convolutions (they stay BatchNormalization nodes)
  onnx_gpt.onnx   a one-layer GPT (token + position embeddings, pre-LayerNorm,
                  causal attention from one qkv projection split in three,
                  masked_fill, softmax, exact GELU, tied head), opset 17
                  (LayerNormalization), batch and time dynamic: the graph
                  computes its shapes (Shape, Gather, Slice, Unsqueeze, Concat)
  onnx_models.json   {"mlp"|"cnn"|"gpt": {"inputs": [...], "outputs": [...]}},
                     the GPT at two lengths (8 and 5 tokens)

Run: /usr/bin/python3 tools/gen_goldens.py onnx_models
"""
import io
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from goldens import common


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(20, 32), nn.Linear(32, 16), nn.Linear(16, 5)

    def forward(self, x):
        return torch.sigmoid(self.fc3(torch.tanh(self.fc2(torch.relu(self.fc1(x))))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = F.max_pool2d(self.bn1(F.relu(self.conv1(x))), 2)
        x = F.avg_pool2d(self.bn2(F.relu(self.conv2(x))), 2)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.head(x)


class Gpt(nn.Module):
    def __init__(self, vocab=50, block=16, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(block, dim)
        self.ln_1, self.ln_2, self.ln_f = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.c_attn, self.c_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.c_fc, self.mlp_proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block), persistent=False)

    def forward(self, idx):
        b, t = idx.shape
        pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0)
        x = self.wte(idx) + self.wpe(pos)
        q, k, v = self.c_attn(self.ln_1(x)).split(x.size(-1), dim=2)
        hd = x.size(-1) // self.heads
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, x.size(-1))
        x = x + self.c_proj(y)
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))
        return self.ln_f(x) @ self.wte.weight.T


def export(model, args, name, opset, dynamic_axes=None, input_names=("x",)):
    buf = io.BytesIO()
    torch.onnx.export(model, args, buf, opset_version=opset, input_names=list(input_names), output_names=["y"],
                      dynamic_axes=dynamic_axes, do_constant_folding=True)
    (common.OUT / f"onnx_{name}.onnx").write_bytes(buf.getvalue())


def generate():
    torch.manual_seed(29)
    out = {}

    mlp = Mlp().eval()
    x = torch.randn(4, 20, generator=common.gen(1))
    export(mlp, (x,), "mlp", 11)
    with torch.no_grad():
        out["mlp"] = {"inputs": [common.t(x)], "outputs": [common.t(mlp(x))]}

    cnn = Cnn()
    with torch.no_grad():  # running statistics and affine values that are not the identity
        for bn in (cnn.bn1, cnn.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    cnn.eval()
    x = torch.randn(2, 3, 16, 16, generator=common.gen(2))
    export(cnn, (x,), "cnn", 13)
    with torch.no_grad():
        out["cnn"] = {"inputs": [common.t(x)], "outputs": [common.t(cnn(x))]}

    gpt = Gpt().eval()
    idx = torch.randint(0, 50, (2, 8), generator=common.gen(3))
    export(gpt, (idx,), "gpt", 17, dynamic_axes={"idx": {0: "batch", 1: "time"}, "y": {0: "batch", 1: "time"}},
           input_names=("idx",))
    idx5 = torch.randint(0, 50, (3, 5), generator=common.gen(4))
    with torch.no_grad():
        out["gpt"] = {"inputs": [common.t(idx)], "outputs": [common.t(gpt(idx))],
                      "inputs_5": [common.t(idx5)], "outputs_5": [common.t(gpt(idx5))]}
    common.dump("onnx_models", out)
