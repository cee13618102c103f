"""PyTorch's side of bench/train_gpt_bench.cpp (gpt_char): a compact nanoGPT
(karpathy/nanoGPT model.py, CPU Shakespeare-char config: vocab 65, 4 layers,
4 heads, width 128, context 64, no bias, tied lm_head, pre-LayerNorm, GELU MLP
4x), batch 12 of random tokens and targets, AdamW lr 1e-3 betas (0.9, 0.99),
weight decay 0.1 on the 2-D parameters only (nanoGPT's configure_optimizers).
PyTorch 1.13 has neither LayerNorm(bias=False) nor scaled_dot_product_attention:
F.layer_norm with bias None, and nanoGPT's non-flash masked-softmax attention.
gpt_char_bf16 is the same step, f32 or under bf16 autocast (torch_util.bf16_autocast)."""
import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_util import MemoryProbe, bf16_autocast, run_workload, update

VOCAB, BLOCK, LAYERS, HEADS, EMBD = 65, 64, 4, 4, 128


class LayerNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(EMBD, 3 * EMBD, bias=False)
        self.c_proj = nn.Linear(EMBD, EMBD, bias=False)
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(EMBD, dim=2)
        q = q.view(B, T, HEADS, C // HEADS).transpose(1, 2)  # [B, H, T, Dh]
        k = k.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        v = v.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(EMBD, 4 * EMBD, bias=False)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * EMBD, EMBD, bias=False)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = LayerNorm(EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = LayerNorm(EMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, EMBD), wpe=nn.Embedding(BLOCK, EMBD),
            h=nn.ModuleList([Block() for _ in range(LAYERS)]), ln_f=LayerNorm(EMBD)))
        self.lm_head = nn.Linear(EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * LAYERS) if name.endswith("c_proj.weight") else 0.02
                torch.nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def gpt_step_flops(B, T):
    """bench/train_gpt_bench.cpp's gpt_step_flops for the same config."""
    N, C = B * T, EMBD
    layer = N * 12 * C * C + 2.0 * B * T * T * C
    return 2.0 * 3.0 * (LAYERS * layer + N * C * VOCAB)


def _gpt(batch, context, bf16=False):
    def run(name, reps):
        mem = MemoryProbe()
        torch.manual_seed(0)
        model = GPT()
        params = [p for p in model.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))
        g = torch.Generator().manual_seed(1)
        idx = torch.randint(0, VOCAB, (batch, context), generator=g)
        targets = torch.randint(0, VOCAB, (batch, context), generator=g)

        autocast = bf16_autocast() if bf16 else contextlib.nullcontext()

        def step():
            with autocast:
                loss = model(idx, targets)
            update(loss, opt)

        run_workload(name, reps, step, mem, unit="tokens/s", items_per_step=batch * context,
                     flops_per_step=gpt_step_flops(batch, context))
    return run


def benches():
    return [("gpt_char", _gpt(12, 64)),
            # gpt_char_bf16: f32, or bf16 autocast with torch_bench.py --autocast bf16; bench/run
            # compares kiln's bf16 figure with the better of the two (issue 22).
            ("gpt_char_bf16", _gpt(12, 64, bf16=True))]
