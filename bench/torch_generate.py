"""PyTorch's side of bench/generate_bench.cpp (lm_generate): nanoGPT's generate
(karpathy/nanoGPT model.py GPT.generate: no KV cache, the whole context re-run
for every new token, logits / temperature, softmax, multinomial) on the model of
bench/torch_train_gpt.py with block_size 256, batch 1, a 64-token prompt
generated to 256 tokens (192 new), under torch.no_grad()."""
import torch
import torch.nn.functional as F

import torch_train_gpt as gpt
from torch_util import MemoryProbe, run_workload

PROMPT, BLOCK = 64, 256


def logits_of(model, idx):
    """GPT.forward without the loss: [B, T, V]."""
    t = idx.size(1)
    x = model.transformer.wte(idx) + model.transformer.wpe(torch.arange(0, t, dtype=torch.long))
    for block in model.transformer.h:
        x = block(x)
    return model.lm_head(model.transformer.ln_f(x))


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature, g):
    for _ in range(max_new_tokens):
        idx_cond = idx if idx.size(1) <= BLOCK else idx[:, -BLOCK:]
        logits = logits_of(model, idx_cond)[:, -1, :] / temperature
        probs = F.softmax(logits, dim=-1)
        idx = torch.cat((idx, torch.multinomial(probs, num_samples=1, generator=g)), dim=1)
    return idx


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
