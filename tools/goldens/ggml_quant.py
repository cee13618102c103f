"""Goldens for kiln's Q8_0 / Q4_0 quantizers (kiln/nn/quantized.h): a numpy
port of ggml's reference quantizers (ggml-quants.c, quantize_row_q8_0_ref and
quantize_row_q4_0_ref), operation for operation in float32, so that kiln's
codes can be checked byte for byte against ggml's rounding.

Writes tests/goldens/nn_quant_ggml.json: {"cases": [{"name", "rows", "cols",
"x": float32 bit patterns (uint32), "q8_0": {"codes": int8 [rows*cols],
"scales": f16 bit patterns [rows*cols/32]}, "q4_0": {"codes": uint8
[rows*cols/2] (ggml's byte order), "scales": ...}}]}."""
import numpy as np

from . import common

QK = 32
f32 = np.float32


def _round_away(v):
    """C's roundf (half away from zero) of float32 values, exactly (in f64)."""
    v = v.astype(np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def quantize_q8_0(x):
    """One row of float32 (len % 32 == 0) -> (int8 codes, float16 scales)."""
    codes, scales = [], []
    for b in range(len(x) // QK):
        xb = x[b * QK:(b + 1) * QK]
        amax = f32(0)
        for v in xb:
            amax = max(amax, f32(abs(v)))
        d = f32(amax / f32(127))
        idv = f32(f32(1) / d) if d != 0 else f32(0)
        scales.append(np.float16(d))                       # round to nearest even, as ggml's FP32_TO_FP16
        codes.extend(_round_away((xb * idv).astype(f32)).astype(np.int8))
    return np.array(codes, np.int8), np.array(scales, np.float16)


def quantize_q4_0(x):
    codes, scales = [], []
    for b in range(len(x) // QK):
        xb = x[b * QK:(b + 1) * QK]
        amax, mx = f32(0), f32(0)
        for v in xb:                                       # the first value of largest magnitude, signed
            if amax < abs(v):
                amax, mx = f32(abs(v)), f32(v)
        d = f32(mx / f32(-8))
        idv = f32(f32(1) / d) if d != 0 else f32(0)
        scales.append(np.float16(d))
        for j in range(QK // 2):
            x0 = f32(f32(xb[j] * idv) + f32(8.5))
            x1 = f32(f32(xb[QK // 2 + j] * idv) + f32(8.5))
            q0 = min(15, int(np.trunc(x0)))                # (int8_t) truncates toward zero
            q1 = min(15, int(np.trunc(x1)))
            codes.append(q0 | (q1 << 4))
    return np.array(codes, np.uint8), np.array(scales, np.float16)


def _cases():
    rng = np.random.default_rng(29)
    cases = []

    def case(name, x, rows):
        x = np.asarray(x, f32).reshape(-1)
        cols = len(x) // rows
        q8c, q8s = zip(*(quantize_q8_0(x[r * cols:(r + 1) * cols]) for r in range(rows)))
        q4c, q4s = zip(*(quantize_q4_0(x[r * cols:(r + 1) * cols]) for r in range(rows)))
        cases.append({
            "name": name, "rows": rows, "cols": cols,
            "x": x.view(np.uint32).tolist(),
            "q8_0": {"codes": np.concatenate(q8c).tolist(), "scales": np.concatenate(q8s).view(np.uint16).tolist()},
            "q4_0": {"codes": np.concatenate(q4c).tolist(), "scales": np.concatenate(q4s).view(np.uint16).tolist()},
        })

    case("gaussian", rng.standard_normal(8 * 96, dtype=f32), 8)
    case("scaled", (rng.standard_normal(4 * 64, dtype=f32) * f32(1e-3)).astype(f32), 4)
    # Halves: 127 * k / 254 lands exactly on .5 after scaling (ties away from zero).
    ties = np.array([(j - 16) * 0.5 for j in range(32)] + [127.0] + [0.5 * j for j in range(31)], f32)
    case("ties", ties, 1)
    case("zeros_and_constant", np.concatenate([np.zeros(32, f32), np.full(32, -3.0, f32)]), 1)
    # Largest magnitude negative, and equal magnitudes of both signs (the first wins).
    signs = np.concatenate([rng.standard_normal(31, dtype=f32), [f32(-9.0)],
                            [f32(4.0)], rng.uniform(-1, 1, 30).astype(f32), [f32(-4.0)]])
    case("signed_max", signs, 1)
    case("tiny", (rng.standard_normal(64, dtype=f32) * f32(1e-7)).astype(f32), 1)  # subnormal half scales
    case("large", (rng.standard_normal(64, dtype=f32) * f32(1e4)).astype(f32), 1)
    return cases


def generate():
    common.dump("nn_quant_ggml", {"cases": _cases()})
