"""Goldens for tests/ops/index_test.cpp: gather/scatter, index_select/index_add,
embedding, cat/stack/split/chunk, flip/roll/pad/repeat, tril/triu, one_hot,
topk/sort/argsort. Each case stores its inputs and torch's outputs."""
import torch
import torch.nn.functional as F

from . import common

T = common.t


def vals(*shape, seed, dtype=torch.float32):
    """Random multiples of 1/8: exact in every float dtype and short in JSON."""
    return (common.randn(*shape, seed=seed) * 8).round().div(8).to(dtype)


def randint(high, *shape, seed):
    return torch.randint(0, high, shape, generator=common.gen(seed))


def gather_scatter():
    x = vals(3, 4, 5, seed=1, dtype=torch.float32)
    i1 = randint(4, 3, 2, 5, seed=2)
    i2 = randint(5, 2, 3, 2, seed=3)
    i0 = randint(3, 2, 4, 5, seed=4)
    # scatter: unique positions per row (torch leaves duplicates unspecified);
    # src larger than index.
    base = vals(3, 5, seed=5, dtype=torch.float32)
    sidx = torch.stack([torch.randperm(5, generator=common.gen(10 + r))[:3] for r in range(3)])
    src = vals(4, 4, seed=6, dtype=torch.float32)
    # scatter_add / index_add with duplicates.
    aidx = torch.tensor([[0, 2, 2, 4], [1, 1, 1, 0], [3, 0, 3, 0]])
    asrc = vals(3, 4, seed=7, dtype=torch.float32)
    sel = torch.tensor([2, 0, 2, 1])
    isrc = vals(3, 4, 5, seed=8, dtype=torch.float32)[:, :, :4]
    w = vals(6, 3, seed=9, dtype=torch.float32)
    e_idx = torch.tensor([[5, 0, 2, 2], [1, 3, 4, 0]])
    return {
        "x": T(x), "i1": T(i1), "i2": T(i2), "i0": T(i0),
        "gather_d1": T(torch.gather(x, 1, i1)),
        "gather_dm1": T(torch.gather(x, -1, i2)),
        "gather_d0": T(torch.gather(x, 0, i0)),
        "base": T(base), "sidx": T(sidx), "src": T(src),
        "scatter": T(torch.scatter(base, 1, sidx, src)),
        "scatter_value": T(torch.scatter(base, 1, sidx, -2.5)),
        "scatter_d0": T(torch.scatter(base, 0, sidx[:2].clamp(max=2), src)),
        "aidx": T(aidx), "asrc": T(asrc),
        "scatter_add": T(torch.scatter_add(base, 1, aidx, asrc)),
        "sel": T(sel),
        "index_select_d0": T(torch.index_select(x, 0, sel.clamp(max=2))),
        "index_select_d2": T(torch.index_select(x, 2, sel)),
        "isrc": T(isrc),
        "index_add_d2": T(torch.index_add(x[:, :, :3], 2, sel.clamp(max=2), isrc)),
        "w": T(w), "e_idx": T(e_idx),
        "embedding": T(F.embedding(e_idx, w)),
    }


def joining():
    a = vals(2, 3, seed=20, dtype=torch.float32)
    b = vals(2, 1, seed=21, dtype=torch.float64)
    c = torch.arange(4, dtype=torch.int32).reshape(2, 2)
    d = vals(1, 3, seed=22, dtype=torch.float32)
    e = torch.empty(0)
    s = [vals(2, 3, seed=23 + k, dtype=torch.float32) for k in range(3)]
    return {
        "a": T(a), "b": T(b), "c": T(c), "d": T(d), "e": T(e),
        "cat_d1": T(torch.cat([a, b, c], 1)),
        "cat_d0_skip": T(torch.cat([a, e, d], 0)),
        "cat_int_int": T(torch.cat([c, c.to(torch.int64)], 0)),
        "s0": T(s[0]), "s1": T(s[1]), "s2": T(s[2]),
        "stack_d0": T(torch.stack(s, 0)),
        "stack_d1": T(torch.stack(s, 1)),
        "stack_dm1": T(torch.stack(s, -1)),
        "split_sizes_7_3": [t.shape[0] for t in torch.split(torch.arange(7), 3)],
        "chunk_sizes_5_4": [t.shape[0] for t in torch.chunk(torch.arange(5), 4)],
        "chunk_sizes_6_4": [t.shape[0] for t in torch.chunk(torch.arange(6), 4)],
        "chunk_sizes_13_5": [t.shape[0] for t in torch.chunk(torch.arange(13), 5)],
        "chunk_sizes_0_3": [t.shape[0] for t in torch.chunk(torch.arange(0), 3)],
    }


def rearranging():
    x = vals(2, 3, 4, seed=30, dtype=torch.float32)
    m = vals(2, 3, 5, seed=31, dtype=torch.float32)
    return {
        "x": T(x),
        "flip_02": T(torch.flip(x, [0, 2])),
        "flip_m1": T(torch.flip(x, [-1])),
        "roll_2_d1": T(torch.roll(x, 2, 1)),
        "roll_m1_d0": T(torch.roll(x, -1, 0)),
        "roll_7_d2": T(torch.roll(x, 7, 2)),
        "roll_flat_5": T(torch.roll(x, 5)),
        "pad_1_2": T(F.pad(x, (1, 2))),
        "pad_1_m1_2_0": T(F.pad(x, (1, -1, 2, 0), value=0.5)),
        "pad_m1_m1": T(F.pad(x, (-1, -1))),
        "pad_3d": T(F.pad(x, (0, 1, -1, 1, 1, 0), value=-3.0)),
        "repeat_2_1_3": T(x.repeat(2, 1, 3)),
        "repeat_2_1_1_2": T(x.repeat(2, 1, 1, 2)),
        "m": T(m),
        "tril_0": T(torch.tril(m)), "tril_m1": T(torch.tril(m, -1)), "tril_2": T(torch.tril(m, 2)),
        "triu_0": T(torch.triu(m)), "triu_m1": T(torch.triu(m, -1)), "triu_2": T(torch.triu(m, 2)),
        "triu_big": T(torch.triu(m, 9)), "tril_small": T(torch.tril(m, -9)),
    }


def ordering():
    x = common.randn(3, 6, seed=40, dtype=torch.float32)
    ties = torch.tensor([3., 1., 2., 1., float("nan"), 2., 3., float("nan"), 1.])
    ints = torch.tensor([[4, 1, 4, 0, 1], [2, 2, 9, -3, 2]], dtype=torch.int32)
    oh = torch.tensor([[0, 3, 1], [2, 2, 0]])
    out = {"x": T(x), "ties": T(ties), "ints": T(ints), "oh": T(oh)}
    for name, (v, i) in {
        "topk_3": torch.topk(x, 3),
        "topk_2_d0_small": torch.topk(x, 2, 0, largest=False),
        "sort": torch.sort(x),
        "sort_d0_desc": torch.sort(x, 0, descending=True),
        "sort_ties": torch.sort(ties, stable=True),
        "sort_ties_desc": torch.sort(ties, descending=True, stable=True),
        "sort_ints": torch.sort(ints, stable=True),
        "sort_ints_desc": torch.sort(ints, descending=True, stable=True),
    }.items():
        out[name + "_values"] = T(v)
        out[name + "_indices"] = T(i)
    out["argsort_ties"] = T(torch.argsort(ties, stable=True))
    out["one_hot"] = T(F.one_hot(oh))
    out["one_hot_5"] = T(F.one_hot(oh, 5))
    return out


def generate():
    common.dump("index_gather", gather_scatter())
    common.dump("index_join", joining())
    common.dump("index_rearrange", rearranging())
    common.dump("index_order", ordering())
