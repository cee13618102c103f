"""Goldens for kiln/ops/ssm.h (mamba3_scan) and nn::Mamba3: a PyTorch 1.13
re-implementation (no einops) of state-spaces/mamba's two Mamba-3 SISO
reference recurrences, mamba3_siso_step_ref (one step at a time) and
mamba3_siso_fwd_ref (the chunk-free quadratic form with the trapezoid's
shifted terms), in kiln's layout ([B, T, H, ...] for the per-step tensors).
The two are checked against each other here; the golden values are the step
form's, in f64.

Inputs are not stored: both sides build them from det() below (sin/cos of
the element index in f64, the same libm on both sides, rounded to f32), so
the file holds only results. Each scan case:
{"name", "B", "T", "H", "N", "P", "R", "D", "z", "init", "y", "angle", "h",
"k", "v", "grads": {name: tensor}} with grads of
L = sum(y cy) + sum(h_T ch) + sum(k_T ck) + sum(v_T cv) + sum(angle_T ca);
long cases (T >= 64) keep the per-step q/k/v/z/angles gradients of the first
and last step only ("<name>_first", "<name>_last")."""
import math

import torch

from . import common

PI = math.pi


def det(shape, seed, scale=1.0, shift=0.0):
    """The deterministic test input kiln's tests rebuild bit for bit:
    v_i = shift + scale * sin(0.618034 i + 1.2345 seed) * cos(0.0137 i + 0.5 seed), rounded to f32."""
    n = 1
    for s in shape:
        n *= s
    vals = [shift + scale * math.sin(0.618034 * i + 1.2345 * seed) * math.cos(0.0137 * i + 0.5 * seed)
            for i in range(n)]
    return torch.tensor(vals, dtype=torch.float64).reshape(shape).to(torch.float32).to(torch.float64)


def inputs(B, T, H, N, P, R, has_D, has_z, has_init):
    d = {
        "q": det((B, T, H, N), 1), "k": det((B, T, H, N), 2), "v": det((B, T, H, P), 3),
        "dt": det((B, T, H), 4, 0.045, 0.055),
        "trap": det((B, T, H), 6, 2.0),
        "q_bias": det((H, N), 7, 0.1, 1.0), "k_bias": det((H, N), 8, 0.1, 1.0),
        "angles": det((B, T, H, R), 9, 2.0),
    }
    # adt = A dt with A in [-2, -0.5]
    d["adt"] = (det((B, T, H), 5, 0.75, -1.25) * d["dt"]).to(torch.float32).to(torch.float64)
    d["D"] = det((H,), 10) if has_D else None
    d["z"] = det((B, T, H, P), 11, 2.0) if has_z else None
    if has_init:
        d["init"] = (det((B, H, R), 12, PI, PI), det((B, H, P, N), 13, 0.3), det((B, H, N), 14),
                     det((B, H, P), 15))
    else:
        d["init"] = None
    return d


def rot(x, cos, sin):
    """x [..., N] with pairs (2i, 2i + 1), i < R, turned by the angle (cos, sin [..., R])."""
    R = cos.shape[-1]
    x0, x1 = x[..., 0:2 * R:2], x[..., 1:2 * R:2]
    r0, r1 = x0 * cos - x1 * sin, x0 * sin + x1 * cos
    out = torch.stack((r0, r1), -1).flatten(-2)
    return torch.cat((out, x[..., 2 * R:]), -1)


def step_ref(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D=None, z=None, init=None):
    """mamba3_siso_step_ref: one step at a time. Returns y [B, T, H, P], (angle, h, k, v)."""
    B, T, H, N = q.shape
    P, R = v.shape[-1], angles.shape[-1]
    ang = torch.tanh(angles) * PI
    if init is not None:
        th, h, kp, vp = init
    else:
        th = torch.zeros(B, H, R, dtype=q.dtype)
        h = torch.zeros(B, H, P, N, dtype=q.dtype)
        kp = torch.zeros(B, H, N, dtype=q.dtype)
        vp = torch.zeros(B, H, P, dtype=q.dtype)
    ys = []
    for t in range(T):
        th = th + ang[:, t] * dt[:, t, :, None]
        th = th - 2 * PI * torch.floor(th / (2 * PI)).detach()
        c, s = torch.cos(th), torch.sin(th)
        qr = rot(q[:, t] + q_bias, c, s)
        kr = rot(k[:, t] + k_bias, c, s)
        sg = torch.sigmoid(trap[:, t])
        alpha = torch.exp(adt[:, t])
        beta = (1 - sg) * dt[:, t] * alpha
        gamma = sg * dt[:, t]
        h = (alpha[..., None, None] * h + beta[..., None, None] * (vp[..., :, None] * kp[..., None, :])
             + gamma[..., None, None] * (v[:, t][..., :, None] * kr[..., None, :]))
        o = (h * qr[..., None, :]).sum(-1)
        if D is not None:
            o = o + D[None, :, None] * v[:, t]
        if z is not None:
            o = o * z[:, t] * torch.sigmoid(z[:, t])
        ys.append(o)
        kp, vp = kr, v[:, t]
    return torch.stack(ys, 1), (th, h, kp, vp)


def fwd_ref(q, k, v, adt, dt, trap, q_bias, k_bias, angles, D=None, z=None, init=None):
    """mamba3_siso_fwd_ref: the whole sequence at once (masked decay matrix), per batch row."""
    B, T, H, N = q.shape
    ang = torch.tanh(angles) * PI
    ys, finals = [], []
    for b in range(B):
        sg = torch.sigmoid(trap[b])                      # [T, H]
        cum = torch.cumsum(ang[b] * dt[b][..., None], 0)  # [T, H, R]
        if init is not None:
            cum = cum + init[0][b][None]
        cum = cum - 2 * PI * torch.floor(cum / (2 * PI))
        dt_next = torch.cat((dt[b][1:], torch.zeros_like(dt[b][:1])), 0)
        sg_next = torch.cat((sg[1:], torch.zeros_like(sg[:1])), 0)
        shifted_gamma = dt_next * (1 - sg_next)           # [T, H]
        scale = dt[b] * sg + shifted_gamma
        qb, kb = q[b] + q_bias, k[b] + k_bias
        qk_dot = (qb * kb).sum(-1) * shifted_gamma        # [T, H]
        c, s = torch.cos(cum), torch.sin(cum)
        qr, kr = rot(qb, c, s), rot(kb, c, s)             # [T, H, N]
        ks = kr * scale[..., None]
        a = adt[b].transpose(0, 1)                        # [H, T]
        cs = torch.cumsum(a, -1)
        seg = cs[:, :, None] - cs[:, None, :]             # [H, t, s] = sum_{s < r <= t} adt_r
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        decay = torch.where(mask, torch.exp(torch.where(mask, seg, torch.zeros_like(seg))), torch.zeros_like(seg))
        qk = torch.einsum("thd,shd->hts", qr, ks) * decay
        out = torch.einsum("hts,shd->thd", qk, v[b])
        if init is not None:
            acc = init[1][b] + init[3][b][:, :, None] * init[2][b][:, None, :] * (dt[b][0] * (1 - sg[0]))[:, None, None]
            out = out + torch.einsum("hpn,thn,ht->thp", acc, qr, torch.exp(cs))
        else:
            acc = torch.zeros(H, v.shape[-1], N, dtype=q.dtype)
        if D is not None:
            out = out + D[None, :, None] * v[b]
        out = out - v[b] * qk_dot[..., None]
        if z is not None:
            out = out * z[b] * torch.sigmoid(z[b])
        ys.append(out)
        rev = torch.exp(cs[:, -1:] - cs)                  # [H, T]
        hT = acc * torch.exp(cs[:, -1])[:, None, None] + torch.einsum("thn,thp->hpn", ks, v[b] * rev.transpose(0, 1)[..., None])
        finals.append((cum[-1], hT, kr[-1], v[b][-1]))
    st = tuple(torch.stack([f[i] for f in finals]) for i in range(4))
    return torch.stack(ys), st


def _t(x):
    """A tensor as JSON with 8 significant digits (the tests' tolerances are 1e-5 and looser)."""
    j = common.t(x)
    j["data"] = [float("%.8g" % v) for v in j["data"]]
    return j


def scan_case(name, B, T, H, N, P, R, has_D, has_z, has_init):
    d = inputs(B, T, H, N, P, R, has_D, has_z, has_init)
    keys = ["q", "k", "v", "adt", "dt", "trap", "q_bias", "k_bias", "angles"]
    leaves = {kk: d[kk].clone().requires_grad_() for kk in keys}
    for kk in ("D", "z"):
        if d[kk] is not None:
            leaves[kk] = d[kk].clone().requires_grad_()
    init = None
    if has_init:
        init = tuple(x.clone().requires_grad_() for x in d["init"])
    args = [leaves[kk] for kk in keys]
    y, st = step_ref(*args, leaves.get("D"), leaves.get("z"), init)
    with torch.no_grad():
        y2, st2 = fwd_ref(*[x.detach() for x in args], d["D"], d["z"], d["init"])
        assert (y - y2).abs().max() < 1e-9 * max(1.0, y.abs().max().item()), name
        for a, b in zip(st, st2):
            diff = (a - b).abs()
            if a is st[0]:  # angles: equal modulo 2 pi
                diff = torch.minimum(diff, 2 * PI - diff)
            assert diff.max() < 1e-9, name
    cy = det(y.shape, 21)
    cs = [det(x.shape, 22 + i) for i, x in enumerate(st)]
    loss = (y * cy).sum() + sum((x * c).sum() for x, c in zip(st, cs))
    loss.backward()
    grads = {}
    per_step = ("q", "k", "v", "angles", "z")
    for kk, leaf in leaves.items():
        if T >= 64 and kk in per_step:
            grads[kk + "_first"] = _t(leaf.grad[:, 0])
            grads[kk + "_last"] = _t(leaf.grad[:, -1])
        else:
            grads[kk] = _t(leaf.grad)
    if init is not None:
        for kk, leaf in zip(("init_angle", "init_h", "init_k", "init_v"), init):
            grads[kk] = _t(leaf.grad)
    c = {"name": name, "B": B, "T": T, "H": H, "N": N, "P": P, "R": R, "D": has_D, "z": has_z, "init": has_init,
         "y": _t(y), "grads": grads}
    for kk, x in zip(("angle", "h", "k", "v"), st):
        c[kk] = _t(x)
    return c


def scan_cases():
    cases = []
    # (T, H, N, D, z, init); B = 2 for T = 1, P = 4, R = N / 4 (rope fraction 0.5).
    grid = [
        (1, 2, 16, True, True, True), (1, 4, 32, False, False, False),
        (7, 2, 16, False, False, False), (7, 4, 32, True, True, True), (7, 2, 16, True, False, True),
        (7, 4, 16, False, True, False),
        (64, 2, 16, True, True, False), (64, 4, 32, False, False, True),
        (130, 2, 16, True, True, True), (130, 4, 32, False, False, False),
    ]
    for T, H, N, D, z, init in grid:
        B = 2 if T == 1 else 1
        name = f"T{T}_H{H}_N{N}" + ("_D" if D else "") + ("_z" if z else "") + ("_init" if init else "")
        cases.append(scan_case(name, B, T, H, N, 4, N // 4, D, z, init))
    return cases


# nn::Mamba3's parameters as the tests set them: (name, shape(cfg), seed, scale, shift).
def module_params(D, N, H, P, R):
    Di = H * P
    return [
        ("in_proj.weight", (2 * Di + 2 * N + 3 * H + R, D), 40, 0.3, 0.0),
        ("dt_bias", (H,), 41, 1.0, -3.0),
        ("B_bias", (H, N), 42, 0.1, 1.0),
        ("C_bias", (H, N), 43, 0.1, 1.0),
        ("B_norm.weight", (N,), 44, 0.1, 1.0),
        ("C_norm.weight", (N,), 45, 0.1, 1.0),
        ("D", (H,), 46, 1.0, 0.0),
        ("out_proj.weight", (D, Di), 47, 0.2, 0.0),
    ]


def rms_norm(x, w, eps=1e-5):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def mamba3_module(p, x, cfg, state=None):
    """nn::Mamba3.forward: in_proj split [z, x, B, C, dt, A, trap, angles], A = -max(f(A), A_floor) with
    f(v) = 1 + v (v >= 0), 1 / (1 - v) (v < 0), dt = softplus(dt + dt_bias), RMSNorm on B and C, the scan
    (step form), out_proj."""
    D, N, H, P, R = cfg
    Di = H * P
    B, T, _ = x.shape
    zx = x @ p["in_proj.weight"].t()
    sizes = [Di, Di, N, N, H, H, H, R]
    z, xs, Bm, Cm, dd_dt, dd_A, trap, ang = torch.split(zx, sizes, dim=-1)
    f = torch.where(dd_A >= 0, 1 + dd_A, 1 / (1 - dd_A))
    A = -torch.clamp(f, min=1e-4)
    dt = torch.nn.functional.softplus(dd_dt + p["dt_bias"])
    adt = A * dt
    Bn, Cn = rms_norm(Bm, p["B_norm.weight"]), rms_norm(Cm, p["C_norm.weight"])
    q = Cn[:, :, None, :].expand(B, T, H, N)
    k = Bn[:, :, None, :].expand(B, T, H, N)
    angles = ang[:, :, None, :].expand(B, T, H, R)
    y, st = step_ref(q, k, xs.reshape(B, T, H, P), adt, dt, trap, p["C_bias"], p["B_bias"], angles, p["D"],
                     z.reshape(B, T, H, P), state)
    return y.reshape(B, T, Di) @ p["out_proj.weight"].t(), st


def module_case():
    cfg = (16, 16, 4, 8, 4)   # d_model, d_state, heads, headdim (expand 2), rope angles
    B, T = 2, 9
    params = {n: det(shape, seed, scale, shift).requires_grad_() for n, shape, seed, scale, shift in
              module_params(*cfg)}
    x = det((B, T, cfg[0]), 48).requires_grad_()
    y, st = mamba3_module(params, x, cfg)
    (y * det(y.shape, 49)).sum().backward()
    out = {"d_model": cfg[0], "d_state": cfg[1], "headdim": cfg[3], "B": B, "T": T, "y": _t(y),
           "h": _t(st[1]), "x_grad": _t(x.grad), "grads": {n: _t(t.grad) for n, t in params.items()}}
    return out


def generate():
    torch.set_default_dtype(torch.float64)
    common.dump("mamba3_scan", {"cases": scan_cases()})
    common.dump("mamba3_module", module_case())
    torch.set_default_dtype(torch.float32)
