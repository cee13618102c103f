#!/usr/bin/python3
"""GGUF files kiln writes, read back by an independent reader: Hugging Face's
@huggingface/gguf (npm) through tools/gguf_crosscheck.mjs, on the committed
tests/goldens/io_gguf_kiln_written.gguf (which tests/io/gguf_test.cpp keeps
equal to what save_gguf writes). Metadata (type, subType, value) and tensor
infos (name, ne, type, offset) and the data offset must equal what kiln
recorded in io_gguf_kiln_written.json.

Exit 77 (skipped) without node or without the module; to run it:
    npm install --prefix /tmp/gguf @huggingface/gguf
    NODE_PATH=/tmp/gguf/node_modules python3 tests/io/gguf_crosscheck_test.py
"""
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "goldens" / "io_gguf_kiln_written"


def same(a, b):
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def main():
    node = shutil.which("node")
    if not node:
        print("gguf_crosscheck: skipped (no node)")
        return 77
    run = subprocess.run([node, str(ROOT / "tools" / "gguf_crosscheck.mjs"), str(GOLDEN) + ".gguf"],
                         capture_output=True, text=True, cwd=ROOT)
    if run.returncode == 77:
        print("gguf_crosscheck: skipped (" + run.stderr.strip() + ")")
        return 77
    if run.returncode != 0:
        print(run.stderr)
        return 1
    got = json.loads(run.stdout)
    want = json.loads(GOLDEN.with_suffix(".json").read_text())
    errors = []
    for key, w in want["metadata"].items():
        g = got["metadata"].get(key)
        if g is None:
            errors.append(f"metadata {key!r} missing in @huggingface/gguf's reading")
        elif g["type"] != w["type"] or g.get("subType") != w.get("subType") or not same(g["value"], w["value"]):
            errors.append(f"metadata {key!r}: kiln wrote {w}, @huggingface/gguf read {g}")
    # The reader adds the header's counts as pseudo-keys.
    extra = set(got["metadata"]) - set(want["metadata"]) - {"version", "tensor_count", "kv_count"}
    if extra:
        errors.append(f"metadata keys kiln did not write: {sorted(extra)}")
    if got["metadata"].get("version", {}).get("value") != 3:
        errors.append(f"version {got['metadata'].get('version')}")
    if got["tensors"] != want["tensors"]:
        errors.append(f"tensor infos: kiln wrote {want['tensors']}, @huggingface/gguf read {got['tensors']}")
    if got["tensorDataOffset"] != want["tensorDataOffset"]:
        errors.append(f"data offset: kiln {want['tensorDataOffset']}, @huggingface/gguf {got['tensorDataOffset']}")
    for e in errors:
        print("gguf_crosscheck:", e)
    print(f"gguf_crosscheck: {len(want['metadata'])} keys, {len(want['tensors'])} tensors, "
          f"{'FAILED' if errors else 'identical'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
