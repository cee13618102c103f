"""Goldens for io::translate (tests/models/translate_test.cpp): one small GPT's
weights written by PyTorch in two foreign layouts, and its logits.

  io_translate_nanogpt.safetensors  karpathy/nanoGPT's state_dict names
      (transformer.h.<i>.attn.c_attn.weight [3C, C], nn.Linear [out, in],
      lm_head.weight tied, the causal-mask buffer attn.bias [1, 1, T, T])
  io_translate_gpt2.safetensors     the Hugging Face GPT-2 hub layout
      (h.<i>.attn.c_attn.weight [C, 3C]: Conv1D stores [in, out]; no
      "transformer." prefix, no lm_head: it is tied to wte)
  io_translate.json                 {"config", "idx", "logits"}: logits of the
      nanoGPT model (written out here: pre-LayerNorm, bias=True, exact GELU) in
      f64 from the f32 weights.
"""
import math
import pathlib
import sys

import torch
import torch.nn.functional as F

from goldens import common

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import torch_safetensors  # noqa: E402

V, T, L, H, C, B = 65, 16, 2, 2, 32, 2


def forward(p, idx):
    """nanoGPT's GPT.forward in f64 (p: nanoGPT names)."""
    d = {k: v.double() for k, v in p.items()}
    Bn, Tn = idx.shape
    x = d["transformer.wte.weight"][idx] + d["transformer.wpe.weight"][:Tn]
    for i in range(L):
        h = f"transformer.h.{i}."
        a = F.layer_norm(x, (C,), d[h + "ln_1.weight"], d[h + "ln_1.bias"], 1e-5)
        qkv = a @ d[h + "attn.c_attn.weight"].T + d[h + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(Bn, Tn, H, C // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(torch.tril(torch.ones(Tn, Tn)) == 0, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + y @ d[h + "attn.c_proj.weight"].T + d[h + "attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), d[h + "ln_2.weight"], d[h + "ln_2.bias"], 1e-5)
        m = F.gelu(m @ d[h + "mlp.c_fc.weight"].T + d[h + "mlp.c_fc.bias"])
        x = x + m @ d[h + "mlp.c_proj.weight"].T + d[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), d["transformer.ln_f.weight"], d["transformer.ln_f.bias"], 1e-5)
    return x @ d["transformer.wte.weight"].T


def generate():
    g = common.gen(29)
    p = {"transformer.wte.weight": torch.randn(V, C, generator=g) * 0.1,
         "transformer.wpe.weight": torch.randn(T, C, generator=g) * 0.1,
         "transformer.ln_f.weight": 1 + 0.1 * torch.randn(C, generator=g),
         "transformer.ln_f.bias": 0.1 * torch.randn(C, generator=g)}
    for i in range(L):
        h = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            p[h + ln + ".weight"] = 1 + 0.1 * torch.randn(C, generator=g)
            p[h + ln + ".bias"] = 0.1 * torch.randn(C, generator=g)
        for name, (o, n) in {"attn.c_attn": (3 * C, C), "attn.c_proj": (C, C), "mlp.c_fc": (4 * C, C),
                             "mlp.c_proj": (C, 4 * C)}.items():
            p[h + name + ".weight"] = torch.randn(o, n, generator=g) / math.sqrt(n)
            p[h + name + ".bias"] = 0.1 * torch.randn(o, generator=g)
    p = {k: v.float().contiguous() for k, v in p.items()}

    nano = dict(p)
    nano["lm_head.weight"] = p["transformer.wte.weight"]
    for i in range(L):
        nano[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    torch_safetensors.save(str(common.OUT / "io_translate_nanogpt.safetensors"), nano, {"format": "pt"})

    gpt2 = {}
    for k, v in p.items():
        name = k[len("transformer."):]
        if any(s in name for s in ("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            v = v.T.contiguous()  # Conv1D: [in, out]
        gpt2[name] = v
    for i in range(L):
        gpt2[f"h.{i}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    torch_safetensors.save(str(common.OUT / "io_translate_gpt2.safetensors"), gpt2, {"format": "pt"})

    idx = torch.randint(0, V, (B, T), generator=g)
    logits = forward(p, idx)
    common.dump("io_translate", {"config": {"vocab_size": V, "block_size": T, "n_layer": L, "n_head": H,
                                            "n_embd": C, "bias": True},
                                 "idx": common.t(idx), "logits": common.t(logits)})
