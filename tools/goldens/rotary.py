"""Goldens for kiln/ops/rotary.h: rotary position embedding from a plain
PyTorch reference written here (in f64, then rounded: the angle
pos * base^(-2i / rd) in f32 would be off by ~1e-4 rad at large positions).
Both pair conventions ("rotate_half" GPT-NeoX / LLaMA-HF halves, and
interleaved GPT-J / RoFormer pairs), an offset, explicit positions and a
partial rotary_dim. Each case: {"name", "args": {"base", "offset",
"positions"?, "rotary_dim", "interleaved"}, "x", "c", "out", "grad"} with
grad the x gradient of sum(out * c)."""
import numpy as np
import torch

from . import common


def _t(x):
    j = common.t(x)
    if j["dtype"] == "f32":
        j["data"] = [float(str(np.float32(v))) if isinstance(v, float) else v for v in j["data"]]
    return j


def rope(x, pos, base, rd, interleaved):
    """x [..., T, D] (f64), pos [T] -> x with its first rd features rotated."""
    half = rd // 2
    inv_freq = base ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / rd)   # [rd / 2]
    theta = pos.to(torch.float64)[:, None] * inv_freq[None, :]                    # [T, rd / 2]
    cos, sin = theta.cos(), theta.sin()
    xr, rest = x[..., :rd], x[..., rd:]
    if interleaved:
        a, b = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
    else:
        # rotate_half: (a, b) -> (-b, a) on the two halves.
        cos2, sin2 = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        rot = torch.cat((-xr[..., half:], xr[..., :half]), -1)
        out = xr * cos2 + rot * sin2
    return torch.cat((out, rest), -1)


def _cases():
    cases = []

    def case(name, shape, seed, base=10000.0, offset=0, positions=None, rotary_dim=-1, interleaved=False,
             dtype=torch.float32):
        T, D = shape[-2], shape[-1]
        rd = D if rotary_dim == -1 else rotary_dim
        pos = torch.tensor(positions) if positions is not None else torch.arange(T) + offset
        x = common.randn(*shape, seed=seed).to(dtype)
        x64 = x.to(torch.float64).requires_grad_()
        y = rope(x64, pos, base, rd, interleaved)
        c = common.randn(*shape, seed=seed + 1000).to(dtype)
        (y * c.to(torch.float64)).sum().backward()
        args = {"base": base, "offset": offset, "rotary_dim": rotary_dim, "interleaved": interleaved}
        if positions is not None:
            args["positions"] = list(positions)
        cases.append({"name": name, "args": args, "x": _t(x), "c": _t(c), "out": _t(y.to(dtype)),
                      "grad": _t(x64.grad.to(dtype))})

    for il in (False, True):
        s = "_il" if il else ""
        case("bhtd" + s, (1, 2, 3, 8), 1, interleaved=il)
        case("btd_offset" + s, (2, 3, 6), 2, offset=1000, interleaved=il)
        case("positions" + s, (1, 1, 4, 8), 3, positions=[7, 0, 3, 4095], interleaved=il)
        case("partial" + s, (1, 3, 10), 4, rotary_dim=4, base=500.0, interleaved=il)
        case("td_f64" + s, (3, 4), 5, offset=3, interleaved=il, dtype=torch.float64)
    return cases


def generate():
    common.dump("rotary", {"cases": _cases()})
