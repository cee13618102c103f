#!/usr/bin/env python3
"""Writes the seed corpora of the reader fuzz targets that need no checksum:
tests/fuzz/corpus/{idx,model_config,text}/. (The tokenizer and checkpoints.json
seeds carry kiln's checksums and are written by kiln itself:
FuzzCorpus.ReaderSeedsAreCurrent in tests/data/fuzz_corpus_test.cpp.)

Standard library only; small files, each valid or wrong in one way.

    python3 tests/fuzz/make_reader_corpus.py
"""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def idx_input(images, labels, flags=0):
    """idx_fuzz's input: flags, u16 little-endian length of the images part, images, labels."""
    return bytes([flags]) + struct.pack("<H", len(images)) + images + labels


def images(count, rows=28, cols=28, magic=0x803, n=None):
    n = count if n is None else n
    return struct.pack(">IIII", magic, count, rows, cols) + bytes((i * 7) % 256 for i in range(n * rows * cols))


def labels(count, magic=0x801, n=None, values=None):
    n = count if n is None else n
    body = bytes(values) if values is not None else bytes(i % 10 for i in range(n))
    return struct.pack(">II", magic, count) + body


def idx_seeds():
    yield "one", idx_input(images(1), labels(1))
    yield "three_limit", idx_input(images(3), labels(3), flags=2)
    yield "empty", idx_input(images(0), labels(0))
    yield "not_gzip", idx_input(images(1), labels(1), flags=1)
    yield "bad_magic", idx_input(images(1, magic=0x801), labels(1))
    yield "bad_size", idx_input(images(1, rows=27), labels(1))
    yield "bad_label", idx_input(images(2), labels(2, values=[3, 12]))
    yield "count_mismatch", idx_input(images(2), labels(1))
    yield "truncated", idx_input(images(2, n=1), labels(2))
    yield "extra_data", idx_input(images(1, n=2), labels(1))
    yield "huge_count", idx_input(images(0xFFFFFFF0, n=1), labels(0xFFFFFFF0, n=1))


def model_config_seeds():
    yield "default", {}
    yield "gpt", {"vocab_size": 65, "block_size": 64, "n_layer": 2, "n_head": 4, "n_embd": 64, "dropout": 0.1,
                  "bias": True, "norm": "layer_norm", "norm_eps": 1e-5, "learned_positions": True, "rotary": False,
                  "rotary_base": 10000.0, "mlp": "gelu", "mlp_hidden": 0, "tie_weights": True}
    yield "llama_like", {"vocab_size": 256, "n_embd": 32, "n_head": 2, "norm": "rms_norm", "rotary": True,
                         "learned_positions": False, "mlp": "swiglu", "bias": False, "tie_weights": False}
    yield "bad_huge", {"n_embd": 1000000000, "n_head": 1}
    yield "bad_type", {"n_head": 2.5}
    yield "bad_unknown", {"n_layers": 2}
    yield "bad_divisible", {"n_embd": 100, "n_head": 3}
    yield "bad_nested", {"mlp": [[["gelu"]]]}


def text_seeds():
    # First byte: seq_len - 1 (mod 16); the rest is the file.
    yield "ascii", b"\x03" + b"First Citizen:\nBefore we proceed any further, hear me speak.\n"
    yield "utf8", b"\x01" + "naïve café — 😀 ok".encode()
    yield "bad_utf8", b"\x01" + b"ab\xff\xfecd"
    yield "short", b"\x0f" + b"abc"
    yield "empty", b"\x00"


def write(target, items, encode=lambda x: x):
    out = os.path.join(ROOT, target)
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        os.remove(os.path.join(out, name))
    for name, value in items:
        with open(os.path.join(out, name), "wb") as f:
            f.write(encode(value))
    print(f"{len(os.listdir(out))} files in {out}")


def main():
    write("idx", idx_seeds())
    write("model_config", model_config_seeds(), lambda v: json.dumps(v).encode())
    write("text", text_seeds())


if __name__ == "__main__":
    main()
