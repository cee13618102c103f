#!/usr/bin/python3
"""Regenerates tests/goldens/*.json from PyTorch (Debian python3-torch 1.13).

Run with Debian's interpreter: /usr/bin/python3 tools/gen_goldens.py [MODULE...]
Each module in tools/goldens/ (except common) has generate() and writes its
own files through common.dump(); the files are committed so CI needs no
PyTorch.
"""
import importlib
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

torch.set_num_threads(1)


def main(argv):
    names = argv or sorted(p.stem for p in (HERE / "goldens").glob("*.py") if p.stem not in ("common", "__init__"))
    for name in names:
        module = importlib.import_module(f"goldens.{name}")
        if not hasattr(module, "generate"):
            continue  # a helper such as safetensors_util
        module.generate()
        print(f"goldens: {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
