"""Golden for models::CausalLM (tests/models/causal_lm_test.cpp): two small decoder-only
language models written out in PyTorch f64, one batch each, with their logits, loss and every
parameter's gradient.

- "gpt": nanoGPT's GPT with bias=True (learned positions, LayerNorm, exact GELU MLP 4C,
  lm_head tied to wte); the bias-free one is tools/goldens/gpt.py.
- "llama": LLaMA's layout: no position table, RMSNorm (eps 1e-6), rotary q/k (half-split
  pairs, base 10000, tools/goldens/rotary.py's rope), SwiGLU MLP w2(silu(w1 x) * w3 x) of
  width F, an untied lm_head, no biases.

Keys are kiln's (see tools/goldens/gpt.py for nanoGPT's names); SwiGLU's w1 and w3 are kiln's
linear1.weight rows [0, F) and [F, 2F), w2 is linear2.weight."""
import math

import torch
import torch.nn.functional as F

from goldens import common
from goldens.rotary import rope

V, T, L, H, C, B = 11, 6, 2, 2, 8, 2
FF = 12  # llama's SwiGLU width


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def make_params(llama):
    """Random weights (norms away from one, biases away from zero) under kiln's names."""
    p = {"transformer.wte.weight": torch.randn(V, C) * 0.3}
    if not llama:
        p["transformer.wpe.weight"] = torch.randn(T, C) * 0.3
    for i in range(L):
        h = f"transformer.h.{i}."
        p[h + "norm1.weight"] = 1 + 0.1 * torch.randn(C)
        p[h + "self_attn.in_proj_weight"] = torch.randn(3 * C, C) * 0.3
        p[h + "self_attn.out_proj.weight"] = torch.randn(C, C) * 0.3
        p[h + "norm2.weight"] = 1 + 0.1 * torch.randn(C)
        p[h + "linear1.weight"] = torch.randn(2 * FF if llama else 4 * C, C) * 0.3
        p[h + "linear2.weight"] = torch.randn(C, FF if llama else 4 * C) * 0.3
        if not llama:
            for name, n in (("norm1.bias", C), ("self_attn.in_proj_bias", 3 * C), ("self_attn.out_proj.bias", C),
                            ("norm2.bias", C), ("linear1.bias", 4 * C), ("linear2.bias", C)):
                p[h + name] = 0.1 * torch.randn(n)
    p["transformer.ln_f.weight"] = 1 + 0.1 * torch.randn(C)
    if not llama:
        p["transformer.ln_f.bias"] = 0.1 * torch.randn(C)
    else:
        p["lm_head.weight"] = torch.randn(V, C) * 0.3
    return {k: v.double().requires_grad_() for k, v in p.items()}


def forward(P, idx, llama):
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    pos = torch.arange(T)
    x = P["transformer.wte.weight"][idx]
    if not llama:
        x = x + P["transformer.wpe.weight"][pos]
    g = lambda k: P.get(k)  # noqa: E731 (an absent bias is None)

    def norm(t, prefix):
        if llama:
            return rms_norm(t, P[prefix + ".weight"], 1e-6)
        return F.layer_norm(t, (C,), P[prefix + ".weight"], P[prefix + ".bias"], 1e-5)

    for i in range(L):
        h = f"transformer.h.{i}."
        a = norm(x, h + "norm1")
        q, k, v = F.linear(a, P[h + "self_attn.in_proj_weight"], g(h + "self_attn.in_proj_bias")).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        if llama:
            q, k = rope(q, pos, 10000.0, C // H, False), rope(k, pos, 10000.0, C // H, False)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, P[h + "self_attn.out_proj.weight"], g(h + "self_attn.out_proj.bias"))
        m = norm(x, h + "norm2")
        u = F.linear(m, P[h + "linear1.weight"], g(h + "linear1.bias"))
        if llama:
            w1x, w3x = u.split(FF, dim=-1)
            u = F.silu(w1x) * w3x
        else:
            u = F.gelu(u)
        x = x + F.linear(u, P[h + "linear2.weight"], g(h + "linear2.bias"))
    x = norm(x, "transformer.ln_f")
    head = P["lm_head.weight"] if llama else P["transformer.wte.weight"]  # gpt: tied
    return x @ head.t()


def case(llama, seed):
    torch.manual_seed(seed)
    P = make_params(llama)
    g = common.gen(seed + 1)
    idx = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    logits = forward(P, idx, llama)
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()
    state = {k: common.t(v) for k, v in P.items()}
    if not llama:
        state["lm_head.weight"] = state["transformer.wte.weight"]
    return {"state": state, "idx": common.t(idx), "targets": common.t(targets), "logits": common.t(logits),
            "loss": loss.item(), "grads": {k: common.t(v.grad) for k, v in P.items()}}


def generate():
    common.dump("models_causal_lm", {
        "config": {"vocab_size": V, "block_size": T, "n_layer": L, "n_head": H, "n_embd": C, "llama_mlp_hidden": FF},
        "gpt": case(False, 0), "llama": case(True, 10),
    })
