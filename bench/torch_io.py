"""PyTorch's side of bench/io_bench.cpp: save and load a checkpoint of the
adamw_10m parameters (bench/torch_optim.py) with AdamW's state after one step.

"save": torch.save({"model", "optim"}) to a temporary file beside the target,
fsync, os.replace, fsync of the folder (what kiln's save does for
durability); "load": torch.load + model and optimizer load_state_dict;
"file_size": the file's size in bytes. Folder: $KILN_BENCH_DIR or /tmp.
"""
import os

import torch

from torch_optim import SHAPES
from torch_util import emit, seconds_per_call


def _save(obj, path):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _bench(name, reps):
    g = torch.Generator().manual_seed(0)
    model = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(s, generator=g)) for s in SHAPES["adamw_10m"]])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)
    opt.step()
    path = os.path.join(os.environ.get("KILN_BENCH_DIR", "/tmp"), f"torch_bench_{name}.pt")

    def save():
        _save({"model": model.state_dict(), "optim": opt.state_dict()}, path)

    def load():
        ckpt = torch.load(path)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optim"])

    emit(name, "save", "ms/save", seconds_per_call(save, reps, 1.0) * 1e3)
    emit(name, "load", "ms/load", seconds_per_call(load, reps, 1.0) * 1e3)
    emit(name, "file_size", "bytes", os.path.getsize(path))
    os.remove(path)


def benches():
    return [("checkpoint_10m", _bench)]
