"""Golden for models::GPT (tests/models/gpt_test.cpp): a small nanoGPT (karpathy/nanoGPT
model.py written out: pre-LayerNorm blocks without bias, masked-softmax causal attention,
exact GELU MLP 4x, lm_head tied to wte) in f64 with nanoGPT's init, one batch, and its logits,
loss, every parameter's gradient and the losses of 3 AdamW steps (lr 1e-2, betas (0.9, 0.99),
weight decay 0.1 on the 2-D parameters only). Keys are kiln's: nanoGPT's ln_1 / attn.c_attn /
attn.c_proj / ln_2 / mlp.c_fc / mlp.c_proj are norm1 / self_attn.in_proj_weight /
self_attn.out_proj.weight / norm2 / linear1 / linear2."""
import math

import torch
import torch.nn.functional as F

from goldens import common

V, T, L, H, C, B = 11, 6, 2, 2, 8, 2
KILN_NAMES = {"ln_1": "norm1", "ln_2": "norm2", "attn.c_attn.weight": "self_attn.in_proj_weight",
              "attn.c_proj.weight": "self_attn.out_proj.weight", "mlp.c_fc": "linear1", "mlp.c_proj": "linear2"}


def kiln_key(name):
    for a, b in KILN_NAMES.items():
        name = name.replace(a, b)
    return name


def generate():
    torch.manual_seed(0)
    p = {"transformer.wte.weight": torch.randn(V, C) * 0.02, "transformer.wpe.weight": torch.randn(T, C) * 0.02,
         "transformer.ln_f.weight": 1 + 0.1 * torch.randn(C)}
    for i in range(L):
        h = f"transformer.h.{i}."
        p[h + "ln_1.weight"] = 1 + 0.1 * torch.randn(C)
        p[h + "attn.c_attn.weight"] = torch.randn(3 * C, C) * 0.02
        p[h + "attn.c_proj.weight"] = torch.randn(C, C) * 0.02 / math.sqrt(2 * L)
        p[h + "ln_2.weight"] = 1 + 0.1 * torch.randn(C)
        p[h + "mlp.c_fc.weight"] = torch.randn(4 * C, C) * 0.02
        p[h + "mlp.c_proj.weight"] = torch.randn(C, 4 * C) * 0.02 / math.sqrt(2 * L)
    params = {k: v.double().requires_grad_() for k, v in p.items()}
    state = {kiln_key(k): common.t(v) for k, v in params.items()}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    g = common.gen(1)
    idx = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def forward():
        P = params
        x = P["transformer.wte.weight"][idx] + P["transformer.wpe.weight"][torch.arange(T)]
        for i in range(L):
            h = f"transformer.h.{i}."
            a = F.layer_norm(x, (C,), P[h + "ln_1.weight"], None, 1e-5)
            q, k, v = (a @ P[h + "attn.c_attn.weight"].t()).split(C, dim=2)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
            att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + y @ P[h + "attn.c_proj.weight"].t()
            m = F.layer_norm(x, (C,), P[h + "ln_2.weight"], None, 1e-5)
            x = x + F.gelu(m @ P[h + "mlp.c_fc.weight"].t()) @ P[h + "mlp.c_proj.weight"].t()
        x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], None, 1e-5)
        return x @ P["transformer.wte.weight"].t()  # tied lm_head

    logits = forward()
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    grads = {kiln_key(k): common.t(v.grad) for k, v in params.items()}
    for v in params.values():
        v.grad = None
    groups = [{"params": [v for v in params.values() if v.dim() >= 2], "weight_decay": 0.1},
              {"params": [v for v in params.values() if v.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.99))
    losses = []
    for _ in range(3):
        step_loss = F.cross_entropy(forward().reshape(-1, V), targets.reshape(-1))
        step_loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(step_loss.item())
    common.dump("models_gpt", {
        "config": {"vocab_size": V, "block_size": T, "n_layer": L, "n_head": H, "n_embd": C},
        "state": state, "idx": common.t(idx), "targets": common.t(targets), "logits": common.t(logits),
        "loss": loss.item(), "grads": grads, "adamw_losses": losses,
    })
