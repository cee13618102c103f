#!/usr/bin/env python3
"""Writes the seed corpus of the safetensors fuzz target (tests/fuzz/corpus/safetensors/).

Standard library only. Valid files cover every dtype kiln reads (F16 with its
special values), 0-d and empty tensors, metadata, a header padded like kiln's
and the reference writer's, and data in another order than the header; the
invalid ones are each one kind of corrupt file that the loader must reject
with a kiln::Error. The fuzzer mutates from these; keep them small.

    python3 tests/fuzz/make_corpus.py
"""
import json
import math
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "safetensors")

# name -> (struct format of one element, bytes per element)
FORMATS = {"BOOL": "B", "U8": "B", "I32": "i", "I64": "q", "BF16": "H", "F16": "e", "F32": "f", "F64": "d"}


def tensor(dtype, shape, values):
    """(dtype, shape, little-endian bytes) of a tensor, row-major."""
    n = math.prod(shape)
    assert len(values) == n, (shape, len(values))
    return dtype, list(shape), struct.pack("<%d%s" % (n, FORMATS[dtype]), *values)


def file_bytes(tensors, metadata=None, pad=True, order=None):
    """A safetensors file: tensors is a dict name -> tensor(); order is the order
    of the data (default: the header's)."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    offsets = {}
    for name in order or tensors:
        dtype, shape, raw = tensors[name]
        offsets[name] = [len(data), len(data) + len(raw)]
        data += raw
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": offsets[name]}
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + data


def raw(header_text, data=b""):
    """A file from a header given as text (for the invalid ones)."""
    text = header_text.encode()
    return struct.pack("<Q", len(text)) + text + data


def bf16(x):
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16


def seeds():
    every = {
        "b": tensor("BOOL", [2, 2], [1, 0, 0, 1]),
        "u8": tensor("U8", [3], [0, 128, 255]),
        "i32": tensor("I32", [2], [-(2**31), 2**31 - 1]),
        "i64": tensor("I64", [2], [-(2**62), 7]),
        "bf16": tensor("BF16", [2], [bf16(1.5), bf16(-2.0)]),
        "f16": tensor("F16", [2], [0.5, -3.0]),
        "f32": tensor("F32", [1, 3], [1.0, -0.0, 3.25]),
        "f64": tensor("F64", [2], [math.pi, -1e300]),
    }
    yield "every_dtype", file_bytes(every, {"format": "pt", "epoch": "3"})
    yield "f16_specials", file_bytes(
        {"h": tensor("F16", [6], [math.inf, -math.inf, math.nan, 6e-8, 65504.0, -0.0])})
    yield "scalar_and_empty", file_bytes({
        "step": tensor("I64", [], [12345]),
        "lr": tensor("F64", [], [3e-4]),
        "none": tensor("F32", [0], []),
        "rows": tensor("F32", [0, 3], []),
        "i": tensor("I32", [2, 0, 2], []),
    })
    yield "metadata_only", file_bytes({}, {"format_version": "1", "config": '{"hidden": 64}', "step": "100"})
    yield "empty_header", file_bytes({}, pad=False)
    yield "unpadded", file_bytes({"w": tensor("F32", [2], [1.0, 2.0])}, pad=False)
    yield "data_order_differs", file_bytes(
        {"a": tensor("F32", [2], [1.0, 2.0]), "b": tensor("I64", [1], [3]), "c": tensor("U8", [3], [1, 2, 3])},
        order=["c", "a", "b"])
    yield "checkpoint_like", file_bytes(
        {"fc.weight": tensor("F32", [2, 2], [0.1, 0.2, 0.3, 0.4]), "fc.bias": tensor("F32", [2], [0.0, 1.0]),
         "optim.fc.weight.exp_avg": tensor("F32", [2, 2], [0, 0, 0, 0]), "optim.step": tensor("I64", [], [10])},
        {"format_version": "1", "progress": '{"epoch": 1, "global_step": 10, "step_in_epoch": 2}',
         "crc32c": '{"fc.weight": "0x1c2d3e4f"}'})
    # Invalid: one problem each.
    yield "bad_short_file", b"\x10\x00\x00"
    yield "bad_header_too_long", struct.pack("<Q", 1 << 40) + b"{}"
    yield "bad_json", raw('{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]', b"\0" * 4)
    yield "bad_not_object", raw("[1, 2, 3]")
    yield "bad_dtype", raw('{"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}', b"\1\2")
    yield "bad_shape_mismatch", raw('{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', b"\0" * 8)
    yield "bad_overlap", raw('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                             '"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}', b"\0" * 4)
    yield "bad_gap", raw('{"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}', b"\0" * 4)
    yield "bad_beyond_end", raw('{"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}', b"\0" * 8)
    yield "bad_shape_overflow", raw(
        '{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}', b"\0" * 8)
    yield "bad_negative", raw('{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}', b"\0")
    yield "bad_duplicate", raw('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                               '"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0")
    yield "bad_metadata_value", raw('{"__metadata__":{"epoch":3}}')
    yield "bad_bool_value", raw('{"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}', b"\1\2")
    yield "bad_truncated", file_bytes({"w": tensor("F64", [4], [1, 2, 3, 4])})[:-5]


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if not name.startswith("checkpoint_"):  # those are written by kiln (tests/data/fuzz_corpus_test.cpp)
            os.remove(os.path.join(OUT, name))
    total = 0
    for name, data in seeds():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)
        total += len(data)
    print(f"{len(os.listdir(OUT))} files, {total} bytes in {OUT}")


if __name__ == "__main__":
    main()
