"""PyTorch's side of bench/generate_bench.cpp (lm_generate): batch-1 sampling
with a KV cache, written as users write it (Hugging Face GPT-2's `layer_past`,
nanoGPT-style code): the model of bench/torch_train_gpt.py with block_size
256, a 64-token prompt run once as the prefill (keeping each layer's K and V),
then one token per forward, each layer's new K/V concatenated to its past
(torch.cat), attention of the new query over the whole past. Logits of the
last position / temperature 1, softmax, torch.multinomial; 192 new tokens (the
last one drawn needs no forward), as kiln's models::generate. Under
torch.no_grad(); the cache is rebuilt for every call (the prefill is timed)."""
import math

import torch
import torch.nn.functional as F

import torch_train_gpt as gpt
from torch_util import MemoryProbe, run_workload

PROMPT, BLOCK = 64, 256


def attention_cached(attn, x, past):
    """CausalSelfAttention.forward with a cache: x [B, t, C], past None or
    (k, v) [B, H, T0, Dh]; returns y [B, t, C] and (k, v) [B, H, T0 + t, Dh]."""
    B, t, C = x.size()
    q, k, v = attn.c_attn(x).split(gpt.EMBD, dim=2)
    q = q.view(B, t, gpt.HEADS, C // gpt.HEADS).transpose(1, 2)  # [B, H, t, Dh]
    k = k.view(B, t, gpt.HEADS, C // gpt.HEADS).transpose(1, 2)
    v = v.view(B, t, gpt.HEADS, C // gpt.HEADS).transpose(1, 2)
    if past is not None:
        k = torch.cat((past[0], k), dim=2)
        v = torch.cat((past[1], v), dim=2)
    T = k.size(2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # [B, H, t, T]
    if t > 1:  # the prefill: causal mask over the new rows (one new token sees everything)
        att = att.masked_fill(attn.bias[:, :, T - t:T, :T] == 0, float("-inf"))
    y = F.softmax(att, dim=-1) @ v
    return attn.c_proj(y.transpose(1, 2).contiguous().view(B, t, C)), (k, v)


def logits_cached(model, idx, cache):
    """GPT.forward without the loss for idx [B, t] after cache's T0 positions:
    logits [B, t, V]; cache (one (k, v) per layer, or None) is updated in place."""
    t0 = 0 if cache[0] is None else cache[0][0].size(2)
    pos = torch.arange(t0, t0 + idx.size(1), dtype=torch.long)
    x = model.transformer.wte(idx) + model.transformer.wpe(pos)
    for i, block in enumerate(model.transformer.h):
        y, cache[i] = attention_cached(block.attn, block.ln_1(x), cache[i])
        x = x + y
        x = x + block.mlp(block.ln_2(x))
    return model.lm_head(model.transformer.ln_f(x))


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature, g):
    """The new tokens [B, max_new_tokens] after idx [B, Tp] (Tp + max_new_tokens <= BLOCK)."""
    cache = [None] * len(model.transformer.h)
    logits = logits_cached(model, idx, cache)  # the prefill
    out = []
    for n in range(max_new_tokens):
        probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
        out.append(torch.multinomial(probs, num_samples=1, generator=g))
        if n + 1 < max_new_tokens:
            logits = logits_cached(model, out[-1], cache)
    return torch.cat(out, dim=1)


def _lm_generate(name, reps):
    mem = MemoryProbe()
    torch.manual_seed(0)
    block, gpt.BLOCK = gpt.BLOCK, BLOCK  # the model's tables are sized from the module's BLOCK
    try:
        model = gpt.GPT().eval()
    finally:
        gpt.BLOCK = block
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, gpt.VOCAB, (1, PROMPT), generator=g)
    new = BLOCK - PROMPT

    def step():
        generate(model, prompt, new, 1.0, torch.Generator().manual_seed(0))

    run_workload(name, reps, step, mem, unit="tokens/s", items_per_step=new)


def benches():
    return [("lm_generate", _lm_generate)]
