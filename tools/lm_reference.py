#!/usr/bin/python3
"""nanoGPT's CPU shakespeare_char recipe in PyTorch 1.13: the reference for `kiln train lm`.

    tools/lm_reference.py --data ../shared/data/tinyshakespeare.txt [--seed S] [--iters N]
        [--kiln-init CHECKPOINT] [--kiln-batches SEED] [--csv OUT.csv]

The model is bench/torch_train_gpt.py's nanoGPT (4 layers, 4 heads, width 128,
context 64, no bias, tied lm_head); the recipe is karpathy/nanoGPT's train.py with
config/train_shakespeare_char.py and its README's CPU overrides, which are
`kiln train lm`'s defaults (docs/language_models_training.md): batch 12, AdamW
lr 1e-3 betas (0.9, 0.99), weight decay 0.1 on the 2-D tensors, linear warmup
over 100 steps (it / warmup, nanoGPT's get_lr), cosine to 1e-4 at --iters,
gradient clipping 1.0, 90/10 split of the characters, the final losses
estimated over 200 batches of each split.

By default everything random is PyTorch's (torch.manual_seed(--seed)): the
issue's "PyTorch ends at 1.89-1.90". Two switches take kiln's randomness instead,
so the two frameworks can be compared step by step:
  --kiln-init CHECKPOINT  start from a kiln checkpoint's weights (a `kiln train lm`
                          checkpoint after step 1, whose lr is 0, holds the init)
  --kiln-batches SEED     draw the windows `kiln train lm --seed SEED` draws: its
                          Philox streams restated here (apps/kiln/lm.cpp, RandomWindows;
                          src/core/rngs.cpp), for training and both estimates
--csv writes step,loss,lr per step, the columns of kiln's metrics.csv.

--arch mamba3 trains bench/torch_train_mamba.py's MambaLM instead (the model of
`kiln train lm --arch mamba3 --tokenizer byte`: byte ids, --n-layer blocks of
width --n-embd, --d-state, --headdim; docs/ssm.md) with the same recipe; the
B/C biases join the no-decay group as kiln's M11 marks them.
"""
import argparse
import math
import pathlib
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tools"))
import torch_safetensors  # noqa: E402
from torch_train_gpt import BLOCK, GPT  # noqa: E402
from torch_train_mamba import MambaLM  # noqa: E402

MASK32 = 0xFFFFFFFF


def philox(ctr, key):
    """Philox4x32-10 (include/kiln/core/generator.h)."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def u64(words):
    return words[0] | (words[1] << 32)


def kiln_stream_seeds(seed):
    """The three batch streams of `kiln train lm --seed`: Rngs{{"data", seed}}.next("data")
    three times (derived seed at counter (count, 0x6b696c6e)), each one's next_u64()."""
    key = (seed & MASK32, seed >> 32)
    out = []
    for count in range(3):
        g = u64(philox((count, 0, 0x6B696C6E, 0), key))
        out.append(u64(philox((0, 0, 0, 0), (g & MASK32, g >> 32))))
    return out  # train, train estimate, val estimate


def kiln_starts(stream_seed, count, n_starts):
    key = (stream_seed & MASK32, stream_seed >> 32)
    return torch.tensor([u64(philox((i & MASK32, i >> 32, 0, 0), key)) % n_starts for i in range(count)])


def batch(data, starts):
    x = torch.stack([data[s:s + BLOCK] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + 1 + BLOCK] for s in starts.tolist()])
    return x, y


KILN_TO_NANOGPT = [("norm1", "ln_1"), ("norm2", "ln_2"), ("self_attn.in_proj_weight", "attn.c_attn.weight"),
                   ("self_attn.out_proj.weight", "attn.c_proj.weight"), ("linear1", "mlp.c_fc"),
                   ("linear2", "mlp.c_proj")]


def mamba_key(name):
    """A kiln MambaLM parameter name -> torch_train_mamba.MambaLM's."""
    key = name.replace("backbone.", "", 1)
    parts = key.split(".")
    if parts[0] == "layers":  # layers.i.norm.weight / layers.i.mixer.X
        key = ("norms." + parts[1] + "." + ".".join(parts[3:])) if parts[2] == "norm" else \
              ("mixers." + parts[1] + "." + ".".join(parts[3:]))
    return key


def load_kiln_init(model, path, arch="gpt"):
    state, _ = torch_safetensors.load(path)
    mine = dict(model.named_parameters())
    loaded = 0
    with torch.no_grad():
        for name, t in state.items():
            key = name
            if arch == "mamba3":
                key = mamba_key(name)
            for a, b in KILN_TO_NANOGPT:
                key = key.replace(a, b)
            if key in mine:
                mine[key].copy_(t)
                loaded += 1
    if loaded != len(mine):
        sys.exit(f"lm_reference: {path} set {loaded} of the model's {len(mine)} parameters")


def get_lr(it, o):
    if it < o.warmup:
        return o.lr * it / o.warmup
    ratio = (it - o.warmup) / (o.iters - o.warmup)
    return o.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (o.lr - o.min_lr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--batch-size", type=int, default=12)
    ap.add_argument("--eval-iters", type=int, default=200)
    ap.add_argument("--kiln-init")
    ap.add_argument("--kiln-batches", type=int)
    ap.add_argument("--csv")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--arch", choices=["gpt", "mamba3"], default="gpt")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--d-state", type=int, default=64)
    ap.add_argument("--headdim", type=int, default=32)
    o = ap.parse_args()
    torch.set_num_threads(o.threads)
    torch.manual_seed(o.seed)

    if o.arch == "mamba3":  # kiln's byte tokenizer: id = byte value
        data = torch.tensor(list(pathlib.Path(o.data).read_bytes()), dtype=torch.long)
    else:
        text = pathlib.Path(o.data).read_text(encoding="utf-8")
        chars = sorted(set(text))
        stoi = {c: i for i, c in enumerate(chars)}
        data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n_train = int(len(data) * 0.9)
    train, val = data[:n_train], data[n_train:]
    B = o.batch_size

    if o.arch == "mamba3":
        model = MambaLM(o.n_embd, o.n_layer, o.d_state, 2, o.headdim)
    else:
        model = GPT()
    if o.kiln_init:
        load_kiln_init(model, o.kiln_init, o.arch)
    params = list(model.parameters())
    no_decay = {id(p) for n, p in model.named_parameters() if n.endswith(("B_bias", "C_bias"))}
    groups = [{"params": [p for p in params if p.dim() >= 2 and id(p) not in no_decay], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2 or id(p) in no_decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=o.lr, betas=(0.9, 0.99))

    if o.kiln_batches is not None:
        s_train, s_train_eval, s_val_eval = kiln_stream_seeds(o.kiln_batches)
        train_starts = kiln_starts(s_train, o.iters * B, len(train) - BLOCK)
        eval_starts = {"train": kiln_starts(s_train_eval, o.eval_iters * B, len(train) - BLOCK),
                       "val": kiln_starts(s_val_eval, o.eval_iters * B, len(val) - BLOCK)}
    else:
        train_starts = torch.randint(len(train) - BLOCK, (o.iters * B,))
        eval_starts = {"train": torch.randint(len(train) - BLOCK, (o.eval_iters * B,)),
                       "val": torch.randint(len(val) - BLOCK, (o.eval_iters * B,))}

    rows = []
    t0 = time.perf_counter()
    model.train()
    for it in range(o.iters):
        lr = get_lr(it, o)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch(train, train_starts[it * B:(it + 1) * B])
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        rows.append((it + 1, loss.item(), lr))
    seconds = time.perf_counter() - t0

    model.eval()
    est = {}
    with torch.no_grad():
        for split, src in (("train", train), ("val", val)):
            s = eval_starts[split]
            est[split] = sum(model(*batch(src, s[i * B:(i + 1) * B])).item() for i in range(o.eval_iters)) / o.eval_iters
    print(f"val loss: {est['val']:.4f} · train loss {est['train']:.4f} ({o.eval_iters} batches) · {o.iters} "
          f"iterations · {seconds:.1f} s training")
    if o.csv:
        with open(o.csv, "w") as f:
            f.write("step,loss,lr\n")
            for r in rows:
                f.write(f"{r[0]},{r[1]!r},{r[2]!r}\n")


if __name__ == "__main__":
    main()
