"""Goldens for elementwise ops: binary (with broadcasting, promotion and scalar
forms), selection, unary math and activations, and result_type.

Each case is {"op": name, "args": [input names or numbers], "out": tensor};
tests/ops/*_test.cpp map op names to kiln calls.
"""
import torch

from . import common

F = torch.float32


def _t(x):
    """common.t with f32/bf16 values cut to 9 significant digits (still exact
    in f32), to keep the files small."""
    j = common.t(x)
    if x.dtype in (torch.float32, torch.bfloat16):
        j["data"] = [float(f"{v:.9g}") if isinstance(v, float) else v for v in j["data"]]
    return j


def _inputs():
    a = common.randn(2, 3, seed=1, dtype=F) * 2
    b = common.randn(3, seed=2, dtype=F)
    a[0, 0] = b[0]  # a tie for maximum/minimum and the comparisons
    a[1, 2] = 0.0  # a zero for the logical ops
    p = torch.rand(2, 3, generator=common.gen(3), dtype=F) * 3 + 0.1  # positive
    q = a.clone()
    q[0, 1] = float("nan")
    q[1, 0] = float("inf")
    i = torch.randint(-5, 6, (2, 3), generator=common.gen(4))
    j = torch.randint(1, 4, (3,), generator=common.gen(5))
    m = torch.rand(2, 3, generator=common.gen(6)) > 0.5
    n = torch.tensor([True, False, True])
    return {
        "A": a, "B": b, "P": p, "Q": q, "I": i, "J": j, "M": m, "N": n,
        "D": common.randn(2, 3, seed=7),  # f64
        "H": (common.randn(2, 3, seed=8, dtype=F) * 2).to(torch.bfloat16),
        "Z64": torch.tensor(2.5, dtype=torch.float64),  # 0-dim f64
        "ZI": torch.tensor(3),  # 0-dim i64
        "U8": torch.randint(0, 200, (3,), generator=common.gen(9), dtype=torch.uint8),
        "X": torch.tensor([1.0, float("inf"), float("-inf"), float("nan"), 1e-9, 100.0]),
        "Y": torch.tensor([1.0 + 1e-6, float("inf"), float("inf"), float("nan"), 0.0, 100.001]),
    }


def _cases(inputs, table):
    cases = []
    for op, args, fn in table:
        vals = [inputs[x] if isinstance(x, str) else x for x in args]
        cases.append({"op": op, "args": list(args), "out": _t(fn(*vals))})
    return cases


def _binary(inputs):
    T = torch
    table = [
        ("add", ["A", "B"], T.add), ("sub", ["A", "B"], T.sub), ("mul", ["A", "B"], T.mul),
        ("div", ["A", "B"], T.div), ("pow", ["P", "B"], T.pow), ("maximum", ["A", "B"], T.maximum),
        ("minimum", ["A", "B"], T.minimum), ("maximum", ["Q", "B"], T.maximum), ("minimum", ["B", "Q"], T.minimum),
        ("add_alpha", ["A", "B", 2.5], lambda x, y, al: T.add(x, y, alpha=al)),
        ("add", ["I", "A"], T.add), ("add", ["I", "J"], T.add), ("sub", ["J", "I"], T.sub),
        ("mul", ["I", "J"], T.mul), ("div", ["I", "J"], T.div), ("pow", ["J", "J"], T.pow),
        ("mul", ["D", "A"], T.mul), ("add", ["H", "H"], T.add), ("mul", ["H", "A"], T.mul), ("div", ["H", "H"], T.div),
        ("add", ["M", "N"], T.add), ("mul", ["M", "N"], T.mul), ("mul", ["I", "M"], T.mul),
        ("add", ["A", "Z64"], T.add), ("add", ["I", "Z64"], T.add), ("add", ["U8", "ZI"], T.add),
        ("maximum", ["I", "A"], T.maximum), ("minimum", ["I", "J"], T.minimum),
        ("add_alpha", ["I", "J", 3], lambda x, y, al: T.add(x, y, alpha=al)),
        # scalar forms
        ("add_s", ["A", 2.5], T.add), ("add_s", ["I", 2.5], T.add), ("add_s", ["I", 3], T.add),
        ("add_s", ["M", 3], T.add), ("add_s", ["H", 0.3], T.add), ("sub_s", ["A", 1.5], T.sub),
        ("rsub_s", ["A", 2], lambda x, s: s - x), ("mul_s", ["A", -3], T.mul), ("mul_s", ["H", 0.5], T.mul),
        ("mul_s", ["U8", 3], T.mul), ("div_s", ["A", 4], T.div), ("div_s", ["I", 2], T.div),
        ("rdiv_s", ["P", 1], lambda x, s: s / x), ("rdiv_s", ["I", 2.0], lambda x, s: s / x),
        ("pow_s", ["P", 2.5], T.pow), ("pow_s", ["A", 2], T.pow), ("pow_s", ["A", 3], T.pow),
        ("pow_s", ["P", -0.5], T.pow), ("pow_s", ["I", 2], T.pow), ("pow_s", ["I", 0.5], T.pow),
        ("rpow_s", ["A", 2], lambda x, s: s ** x), ("rpow_s", ["J", 2], lambda x, s: s ** x),
        ("rpow_s", ["J", 2.5], lambda x, s: s ** x),
    ]
    return _cases(inputs, table)


def _compare(inputs):
    table = []
    for op in ["eq", "ne", "lt", "le", "gt", "ge"]:
        f = getattr(torch, op)
        table += [(op, ["A", "B"], f), (op, ["I", "A"], f), (op, ["Q", "B"], f), (op + "_s", ["I", 2.5], f),
                  (op + "_s", ["A", 0], f)]
    for op in ["logical_and", "logical_or", "logical_xor"]:
        f = getattr(torch, op)
        table += [(op, ["A", "M"], f), (op, ["M", "N"], f), (op, ["I", "J"], f)]
    table += [
        ("logical_not", ["A"], torch.logical_not), ("logical_not", ["I"], torch.logical_not),
        ("isclose", ["X", "Y"], torch.isclose), ("isclose", ["A", "B"], torch.isclose),
        ("isclose_tol", ["X", "Y", 1e-3, 1e-8], lambda x, y, r, a: torch.isclose(x, y, rtol=r, atol=a)),
        ("isnan", ["Q"], torch.isnan), ("isfinite", ["Q"], torch.isfinite), ("isfinite", ["X"], torch.isfinite),
        ("isnan", ["I"], torch.isnan),
    ]
    return _cases(inputs, table)


def _select(inputs):
    T = torch
    table = [
        ("where", ["M", "A", "B"], T.where), ("where", ["N", "I", "A"], T.where),
        ("where_ts", ["M", "A", 0.5], T.where), ("where_st", ["M", 2, "I"], T.where),
        ("where_ts", ["N", "I", 2.5], T.where), ("where_ts", ["M", "H", 2.5], T.where),
        ("masked_fill", ["A", "N", -1.5], T.masked_fill), ("masked_fill", ["I", "M", 7], T.masked_fill),
        ("masked_fill", ["B", "M", 0.25], T.masked_fill),
    ]
    return _cases(inputs, table)


def _unary():
    T = torch
    x = torch.tensor([[-3.0, -1.25, -0.5, -1e-3, 0.0, 0.3], [0.7, 1.0, 2.0, 4.5, -7.0, 25.0]], dtype=F)
    p = torch.tensor([[1e-3, 0.1, 0.5, 1.0, 2.0, 9.0]], dtype=F)
    r = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.4, 0.6, 2.7, -2.7], dtype=F)
    q = torch.tensor([float("nan"), float("inf"), float("-inf"), -2.0, 0.0, 3.0], dtype=F)
    i = torch.tensor([-3, -1, 0, 2, 5], dtype=torch.int64)
    inputs = {"X": x, "P": p, "R": r, "Q": q, "I": i, "D": x.double(), "H": x.to(torch.bfloat16),
              "M": torch.tensor([True, False])}
    table = [
        ("neg", ["X"], T.neg), ("abs", ["X"], T.abs), ("exp", ["X"], T.exp), ("log", ["P"], T.log),
        ("log1p", ["P"], T.log1p), ("expm1", ["X"], T.expm1), ("sqrt", ["P"], T.sqrt), ("rsqrt", ["P"], T.rsqrt),
        ("square", ["X"], T.square), ("reciprocal", ["P"], T.reciprocal), ("sin", ["X"], T.sin),
        ("cos", ["X"], T.cos), ("tanh", ["X"], T.tanh), ("sigmoid", ["X"], T.sigmoid), ("erf", ["X"], T.erf),
        ("relu", ["X"], T.relu), ("gelu", ["X"], torch.nn.functional.gelu),
        ("gelu_tanh", ["X"], lambda v: torch.nn.functional.gelu(v, approximate="tanh")),
        ("silu", ["X"], torch.nn.functional.silu), ("softplus", ["X"], torch.nn.functional.softplus),
        ("softplus_bt", ["X", 2.0, 1.0], lambda v, b, t: torch.nn.functional.softplus(v, beta=b, threshold=t)),
        ("leaky_relu", ["X", 0.1], torch.nn.functional.leaky_relu), ("sign", ["X"], T.sign),
        ("floor", ["X"], T.floor), ("ceil", ["X"], T.ceil), ("round", ["R"], T.round), ("round", ["X"], T.round),
        ("clamp", ["X", -0.5, 0.5], T.clamp), ("clamp", ["X", 1.5, -1.0], T.clamp),
        ("clamp_min", ["X", 0.25], T.clamp_min), ("clamp_max", ["X", 0.25], T.clamp_max),
        ("clamp", ["I", -1, 3], T.clamp), ("clamp_min", ["I", 1.5], T.clamp_min),
        # special values
        ("exp", ["Q"], T.exp), ("tanh", ["Q"], T.tanh), ("sigmoid", ["Q"], T.sigmoid), ("relu", ["Q"], T.relu),
        ("sign", ["Q"], T.sign), ("abs", ["Q"], T.abs), ("clamp", ["Q", -1.0, 1.0], T.clamp),
        ("gelu", ["Q"], torch.nn.functional.gelu), ("silu", ["Q"], torch.nn.functional.silu),
        ("softplus", ["Q"], torch.nn.functional.softplus),
        # dtypes
        ("exp", ["I"], T.exp), ("sqrt", ["I"], T.sqrt), ("sigmoid", ["I"], T.sigmoid), ("abs", ["I"], T.abs),
        ("neg", ["I"], T.neg), ("relu", ["I"], T.relu), ("sign", ["I"], T.sign), ("square", ["I"], T.square),
        ("floor", ["I"], T.floor), ("round", ["I"], T.round), ("square", ["M"], T.square),
        ("sigmoid", ["D"], T.sigmoid), ("gelu", ["D"], torch.nn.functional.gelu), ("log1p", ["D"], T.log1p),
        ("tanh", ["H"], T.tanh), ("exp", ["H"], T.exp), ("relu", ["H"], T.relu), ("gelu", ["H"], torch.nn.functional.gelu),
    ]
    return _cases(inputs, table), inputs


DESC = {"bool": torch.bool, "u8": torch.uint8, "i32": torch.int32, "i64": torch.int64,
        "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64}


def _promotion():
    """result_type for operands described as "<dtype>[d]" (a [2] tensor),
    "<dtype>[]" (0-dim) or scalars "int", "float", "bool"."""
    def make(desc):
        if desc == "int":
            return 3
        if desc == "float":
            return 2.5
        if desc == "bool":
            return True
        dt, kind = desc[:-2] if desc.endswith("[]") else desc[:-3], desc[-2:] if desc.endswith("[]") else desc[-3:]
        return torch.ones(2, dtype=DESC[dt]) if kind == "[d]" else torch.ones((), dtype=DESC[dt])

    tensors = [f"{d}[d]" for d in DESC] + [f"{d}[]" for d in DESC]
    rows = []
    for a in tensors:
        for b in tensors + ["int", "float", "bool"]:
            rows.append([a, b, common.DTYPES[torch.result_type(make(a), make(b))]])
    return rows


def generate():
    inputs = _inputs()
    common.dump("elementwise_inputs", {k: _t(v) for k, v in inputs.items()})
    common.dump("elementwise_binary", _binary(inputs))
    common.dump("elementwise_compare", _compare(inputs))
    common.dump("elementwise_select", _select(inputs))
    cases, uinputs = _unary()
    common.dump("elementwise_unary", {"inputs": {k: _t(v) for k, v in uinputs.items()}, "cases": cases})
    common.dump("elementwise_promotion", _promotion())
