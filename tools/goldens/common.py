"""Helpers for golden files: tensors as {"shape", "dtype", "data"} JSON."""
import json
import math
import pathlib

import torch

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "goldens"

DTYPES = {
    torch.bool: "bool", torch.uint8: "u8", torch.int32: "i32", torch.int64: "i64",
    torch.bfloat16: "bf16", torch.float32: "f32", torch.float64: "f64",
}


def _num(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


def t(x):
    """A tensor as JSON (values exact: f32/f64 printed with repr precision)."""
    x = x.detach()
    data = x.reshape(-1).to(torch.float64 if x.is_floating_point() else x.dtype).tolist()
    return {"shape": list(x.shape), "dtype": DTYPES[x.dtype], "data": [_num(v) for v in data]}


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


def dump(name, obj):
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(obj, separators=(",", ":")) + "\n")
