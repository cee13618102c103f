#!/usr/bin/env python3
"""Writes the seed corpus of the GGUF fuzz target (tests/fuzz/corpus/gguf/).

Standard library only. Valid files cover every metadata value type (nested
arrays, strings), general.alignment, and tensors of each type kiln reads (F32,
F16, BF16, Q8_0, Q4_0) including 0-d and 4-d ones; the invalid ones are each one
kind of corrupt file the reader must refuse with a kiln::Error. Keep them small.

    python3 tests/fuzz/make_gguf_corpus.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "gguf")
MAGIC = b"GGUF"
# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "B", U64: "Q", I64: "q",
          F64: "d"}
# ggml types: (id, bytes per block, values per block)
T_F32, T_F16, T_Q4_0, T_Q8_0, T_BF16 = 0, 1, 2, 8, 30
LAYOUT = {T_F32: (4, 1), T_F16: (2, 1), T_BF16: (2, 1), T_Q8_0: (34, 32), T_Q4_0: (18, 32)}


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def value(vtype, v):
    if vtype == STRING:
        return s(v)
    if vtype == ARRAY:
        etype, items = v
        return struct.pack("<IQ", etype, len(items)) + b"".join(value(etype, x) for x in items)
    return struct.pack("<" + SCALAR[vtype], v)


def gguf(kvs, tensors, alignment=32, version=3):
    """kvs: [(key, type, value)]; tensors: [(name, ne list, ggml type)]. Data is filled with a pattern."""
    head = MAGIC + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, v in kvs:
        head += s(key) + struct.pack("<I", vtype) + value(vtype, v)
    data, infos = b"", b""
    for name, ne, ttype in tensors:
        n = 1
        for d in ne:
            n *= d
        bb, be = LAYOUT[ttype]
        nbytes = n // be * bb
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", ttype, len(data))
        chunk = bytes((i * 7 + 3) % 251 for i in range(nbytes))
        if ttype in (T_Q8_0, T_Q4_0):  # block scales: a sane half (0x3c00 = 1.0)
            chunk = bytearray(chunk)
            for b in range(0, nbytes, bb):
                chunk[b:b + 2] = b"\x00\x3c"
            chunk = bytes(chunk)
        data += chunk + b"\0" * (-len(chunk) % alignment)
    head += infos
    head += b"\0" * (-len(head) % alignment)
    return head + data


def seeds():
    every = [
        ("general.architecture", STRING, "gpt2"),
        ("u8", U8, 255), ("i8", I8, -5), ("u16", U16, 65535), ("i16", I16, -300), ("u32", U32, 7),
        ("i32", I32, -7), ("f32", F32, 0.25), ("bool", BOOL, 1), ("u64", U64, 2 ** 63), ("i64", I64, -2 ** 63),
        ("f64", F64, 1e300), ("tokens", ARRAY, (STRING, ["a", "", "\u00e9"])),
        ("nested", ARRAY, (ARRAY, [(I32, [1, 2]), (STRING, ["x"]), (U8, [])])),
    ]
    yield "every_value_type", gguf(every, [("t", [4], T_F32)])
    yield "every_tensor_type", gguf([("general.name", STRING, "tiny")], [
        ("f32", [3, 2], T_F32), ("f16", [5], T_F16), ("bf16", [2, 2], T_BF16),
        ("q8", [32, 2], T_Q8_0), ("q4", [64], T_Q4_0), ("scalar", [], T_F32), ("four", [1, 2, 1, 2], T_F32)])
    yield "aligned_64", gguf([("general.alignment", U32, 64)], [("a", [3], T_F32), ("b", [5], T_F32)], alignment=64)
    yield "version2", gguf([], [("a", [2], T_F32)], version=2)
    yield "empty", gguf([], [])
    ok = gguf([], [("a", [8], T_F32)])
    yield "bad_truncated", ok[:-4]
    yield "bad_magic", b"GGML" + ok[4:]
    yield "bad_version", MAGIC + struct.pack("<IQQ", 1, 0, 0)
    yield "bad_type_q4_k", MAGIC + struct.pack("<IQQ", 3, 1, 0) + s("k") + struct.pack("<IQIQ", 1, 256, 12, 0) + b"\0" * 200
    yield "bad_offset", MAGIC + struct.pack("<IQQ", 3, 1, 0) + s("a") + struct.pack("<IQIQ", 1, 4, 0, 4096) + b"\0" * 64
    yield "bad_huge_dims", MAGIC + struct.pack("<IQQ", 3, 1, 0) + s("a") + struct.pack("<IQQIQ", 2, 2 ** 40, 2 ** 40, 0, 0)
    yield "bad_string_length", MAGIC + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2 ** 62) + b"key"
    yield "bad_alignment", gguf([("general.alignment", U32, 48)], [])
    yield "bad_bool", MAGIC + struct.pack("<IQQ", 3, 0, 1) + s("b") + struct.pack("<IB", BOOL, 2)


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(OUT, name + ".gguf"), "wb") as f:
            f.write(data)
    print(f"wrote {len(list(seeds()))} files to {OUT}")


if __name__ == "__main__":
    main()
