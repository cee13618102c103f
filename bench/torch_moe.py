"""PyTorch's side of bench/moe_bench.cpp (moe_gpt_char): torch_train_gpt.py's
nanoGPT with every MLP replaced by a mixture of experts the way users write
one: a router Linear(C, 4), softmax, top-2 renormalised, and a Python loop
over the 4 experts that runs each expert on every token and masks by the
selection (dense), expert width 2 C. Same data, AdamW and step as gpt_char."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_train_gpt as g
from torch_util import MemoryProbe, run_workload, update

EXPERTS, TOP_K, WIDTH = 4, 2, 2 * g.EMBD


class DenseLoopMoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(g.EMBD, EXPERTS, bias=False)
        self.experts = nn.ModuleList(nn.ModuleDict(dict(
            c_fc=nn.Linear(g.EMBD, WIDTH, bias=False), c_proj=nn.Linear(WIDTH, g.EMBD, bias=False)))
            for _ in range(EXPERTS))

    def forward(self, x):
        B, T, C = x.shape
        x = x.reshape(B * T, C)
        p = F.softmax(self.router(x), dim=-1)
        w, idx = torch.topk(p, TOP_K, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        gate = torch.zeros_like(p).scatter(1, idx, w)  # [N, E], zero where not selected
        out = torch.zeros_like(x)
        for e, ex in enumerate(self.experts):
            out = out + gate[:, e:e + 1] * ex.c_proj(F.gelu(ex.c_fc(x)))
        return out.reshape(B, T, C)


def moe_gpt():
    torch.manual_seed(0)
    model = g.GPT()
    for block in model.transformer.h:
        block.mlp = DenseLoopMoE()
    for name, p in model.named_parameters():
        if p.dim() == 2:
            std = 0.02 / math.sqrt(2 * g.LAYERS) if name.endswith("c_proj.weight") else 0.02
            torch.nn.init.normal_(p, mean=0.0, std=std)
    return model


def flops(B, T):
    """moe_bench.cpp's active-FLOP count."""
    N, C = B * T, g.EMBD
    layer = N * (4 * C * C + 2 * 2 * C * WIDTH + C * EXPERTS) + 2.0 * B * T * T * C
    return 2.0 * 3.0 * (g.LAYERS * layer + N * C * g.VOCAB)


def _run(name, reps, batch=12, context=64):
    mem = MemoryProbe()
    model = moe_gpt()
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(0, g.VOCAB, (batch, context), generator=gen)
    targets = torch.randint(0, g.VOCAB, (batch, context), generator=gen)

    def step():
        update(model(idx, targets), opt)

    run_workload(name, reps, step, mem, unit="tokens/s", items_per_step=batch * context,
                 flops_per_step=flops(batch, context))


def benches():
    return [("moe_gpt_char", _run)]
