#!/usr/bin/env python3
"""The layer graph as a test: every #include and link points down the layer order.

Reads the #include lines of include/kiln/**, src/**, tests/**, apps/**,
bench/** and examples/** and fails, naming file:line and the edge, on any
include against the order of docs/architecture.md ("Layers"):

    core -> backend -> ops -> autograd -> nn -> optim -> io -> data -> train
         -> models -> rl -> dist -> apps

A file may include public headers (include/kiln/<layer>/) of its own layer and
the layers below it; private headers (src/<layer>/) and test helpers
(tests/<layer>/) only of its own layer (the kernel folders' headers are the
interface of the layers above them). The umbrella kiln/kiln.h is for programs
over the whole library only: apps/, bench/, examples/ and tests/consumer/.
A member of a lower layer's class may not be defined by a higher layer's
source (one kept exception: NOTE [Tensor's shorthands] below). With
--links FILE it also checks the CMake link graph that the build wrote
(tests/CMakeLists.txt): a layer's target, and its test binary, link only
targets of their layer and below; a library links every layer its sources
include (directly or through the layers it links) and no other.

    python3 tools/check_layers.py [--root DIR] [--links FILE]

Exit status 0 when the graph is clean, 1 with one line per bad edge.
"""
import argparse
import os
import re
import sys

# Bottom to top. A folder named like a layer (include/kiln/X, src/X, tests/X)
# belongs to it; `backend` (src/backend) and `dist` need no other line here.
LAYERS = ["core", "backend", "ops", "autograd", "nn", "optim", "io", "data", "train", "models", "rl", "dist", "apps"]
RANK = {name: i for i, name in enumerate(LAYERS)}

# Kernel folders: their headers are the interface of the layers above them
# (the ops and the optimizers call the kernels), not private to their layer.
KERNEL_FOLDERS = ("src/backend/",)

# NOTE [Tensor's shorthands]: the one edge against the order that kiln keeps,
# libtorch's TensorBody pattern. Tensor (core) declares PyTorch's method
# spellings, x.view(...), loss.backward(), which ops and autograd define
# (src/ops/shape.cpp, src/autograd/engine.cpp): users keep PyTorch's syntax,
# and core's own code never calls them. Moving them out of Tensor loses the
# syntax; dispatching them through a table that ops fills at start-up is the
# runtime registry STYLE.md rules out. Exactly these members, defined by
# exactly these layers (docs/architecture.md, Layers):
ALLOWED_DEFINITIONS = {
    ("Tensor", "ops"): {"view", "reshape", "transpose", "t", "permute", "narrow", "slice", "select", "expand",
                        "squeeze", "unsqueeze", "flatten", "contiguous", "clone", "to"},
    ("Tensor", "autograd"): {"backward"},
}

# Folders whose files are programs over the whole library (the top layer).
TOP_FOLDERS = ("apps", "bench", "examples")
# Test folders that are not a layer's tests, and the layer they sit at. In
# tests/support a file named <layer>_* (ops_testing.h) is that layer's; the
# others (test_util.h) are core's.
TEST_FOLDERS = {
    "support": "core",   # the helpers every layer's tests share
    "consumer": "apps",  # an installed consumer of the whole library
    "fuzz": "apps",      # fuzz targets over the readers of several layers
}
# Fuzz targets drive the readers' internals directly (white-box): they may
# include any layer's private headers.
WHITE_BOX = ("tests/fuzz/",)
# Edges a layer's tests may take beyond their layer, and why. A vjp is an op's
# (ops defines it), but it runs only through the engine, so the ops' tests
# check their vjps with autograd's gradcheck (tests/support/ops_testing.h).
TEST_EDGES = {("ops", "autograd")}
UMBRELLA = "include/kiln/kiln.h"
UMBRELLA_OK = ("apps/", "bench/", "examples/", "tests/consumer/")

SCANNED = ("include/kiln", "src", "tests", "apps", "bench", "examples")
EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".inc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


class Where:
    """Where a file sits: its layer and whether it is private (src/, tests/)."""

    def __init__(self, layer, private_of=None):
        self.layer = layer
        self.private_of = private_of  # a layer: only it may include the file


def locate(rel):
    """The layer of a repository-relative path, or None when it is not kiln's."""
    parts = rel.split("/")
    if rel == UMBRELLA:
        return Where("apps")
    if parts[0] == "include" and len(parts) > 3 and parts[1] == "kiln":
        return Where(parts[2])
    if parts[0] == "src" and len(parts) > 2:
        return Where(parts[1], private_of=parts[1])
    if parts[0] == "tests" and len(parts) > 2:
        if parts[1] == "support":
            prefix = parts[-1].split("_")[0]
            return Where(prefix if prefix in RANK else TEST_FOLDERS["support"])
        layer = TEST_FOLDERS.get(parts[1], parts[1])
        return Where(layer, private_of=None if parts[1] in TEST_FOLDERS else parts[1])
    if parts[0] in TOP_FOLDERS:
        return Where("apps")
    return None


def resolve(root, including_rel, name):
    """The repository-relative path an #include names, or None for headers
    outside the repository (the standard library, gtest, oneDNN, ...)."""
    candidates = [os.path.join(os.path.dirname(including_rel), name), name, os.path.join("include", name)]
    for c in candidates:
        c = os.path.normpath(c)
        if not c.startswith("..") and os.path.isfile(os.path.join(root, c)):
            return c.replace(os.sep, "/")
    if name.startswith("kiln/"):  # a kiln header that does not exist (yet): still an edge
        return "include/" + name
    return None


def scan_files(root):
    """The repository-relative paths of the C++ files the order applies to."""
    for top in SCANNED:
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(EXTENSIONS):
                    yield os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")


def include_edges(root):
    """(file, line, included path) for every kiln #include."""
    for rel in scan_files(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            for n, text in enumerate(fh, 1):
                m = INCLUDE_RE.match(text)
                if not m:
                    continue
                target = resolve(root, rel, m.group(1))
                if target is not None:
                    yield rel, n, target


def check_folders(root):
    """A file in a folder that is no layer (src/utils) would escape the check."""
    errors = []
    for rel in scan_files(root):
        where = locate(rel)
        if where is not None and where.layer not in RANK:
            errors.append(f"{rel}: in folder '{where.layer}', which is no layer (tools/check_layers.py LAYERS)")
    return errors


def check_includes(root):
    """One message per include against the order; and the layers each layer's
    sources (src/ and include/kiln/) include, for the link check."""
    errors, uses = [], {}
    for rel, n, target in include_edges(root):
        src, dst = locate(rel), locate(target)
        if src is None or dst is None:
            continue
        if src.layer not in RANK or dst.layer not in RANK:
            continue  # check_folders names the file
        edge = f"{src.layer} -> {dst.layer}"
        if target == UMBRELLA:
            if not rel.startswith(UMBRELLA_OK):
                errors.append(f"{rel}:{n}: includes the umbrella kiln/kiln.h; include the headers it uses "
                              f"(layer {src.layer} and below)")
            elif rel.startswith("apps/"):  # every layer's headers
                for layer in LAYERS[:RANK[src.layer]]:
                    uses.setdefault(src.layer, {}).setdefault(layer, f"{rel}:{n}")
            continue
        test_edge = rel.startswith("tests/") and (src.layer, dst.layer) in TEST_EDGES
        if RANK[dst.layer] > RANK[src.layer] and not test_edge:
            errors.append(f"{rel}:{n}: {edge} against the layer order: includes {target}")
        elif (dst.private_of and dst.private_of != src.layer and not target.startswith(KERNEL_FOLDERS)
              and not rel.startswith(WHITE_BOX)):
            errors.append(f"{rel}:{n}: {edge}: includes {target}, private to {dst.private_of} "
                          f"(use its public header under include/kiln/{dst.private_of}/)")
        if rel.startswith(("src/", "include/", "apps/")) and RANK[dst.layer] < RANK[src.layer]:
            uses.setdefault(src.layer, {}).setdefault(dst.layer, f"{rel}:{n}")
    return errors, uses


CLASS_RE = re.compile(r"(?:^|[\s>])(?:class|struct)\s+(?:alignas\([^)]*\)\s+)?(\w+)\s*(?:final\s*)?"
                      r"(?::(?!:)[^;]*)?\{?\s*(?://.*)?$")
# A member defined at namespace scope, from column 0: "Tensor Tensor::view(",
# "AtomicFile::AtomicFile(" (not a call: nothing but a return type before it).
MEMBER_RE = re.compile(r"^(?:[A-Za-z_][\w:<>,*& ]*?[\s*&])?(\w+)::(~?\w+)\s*\(")
NOT_A_DEFINITION = re.compile(r"^(return|using|namespace|static_assert|case|if|else|for|while|throw)\b")


def class_layers(root):
    """Class name -> the layers whose headers or sources define a class of that name."""
    owners = {}
    for rel in scan_files(root):
        where = locate(rel)
        if where is None or not rel.startswith(("include/", "src/")):
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            for text in fh:
                m = CLASS_RE.search(text)
                if m and not text.lstrip().startswith(("//", "enum", "friend", "template")):
                    owners.setdefault(m.group(1), {}).setdefault(where.layer, rel)
    return owners


def check_definitions(root):
    """A member of a lower layer's class defined by a higher layer is an edge
    against the order that no #include shows (NOTE [Tensor's shorthands])."""
    errors, owners = [], class_layers(root)
    for rel in scan_files(root):
        if not (rel.startswith("src/") and rel.endswith(".cpp")):
            continue
        layer = locate(rel).layer
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            for n, text in enumerate(fh, 1):
                m = MEMBER_RE.match(text)
                if m and NOT_A_DEFINITION.match(text):
                    m = None
                if not m or m.group(1) not in owners or layer in owners[m.group(1)]:
                    continue
                cls, member = m.group(1), m.group(2)
                home = min(owners[cls], key=lambda l: RANK.get(l, len(RANK)))
                if member in ALLOWED_DEFINITIONS.get((cls, layer), set()):
                    continue
                errors.append(f"{rel}:{n}: {home} -> {layer}: defines {cls}::{member}, a member of {home}'s "
                              f"{cls} ({owners[cls][home]}); define it in {home}, or make it a free function")
    return errors


def read_links(path):
    """target -> [linked kiln targets], from the file tests/CMakeLists.txt writes
    (one line per target: `kiln_rl: kiln_train;kiln_models;...`)."""
    links = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if ":" not in line:
                continue
            target, deps = line.split(":", 1)
            links[target.strip()] = [d for d in re.split(r"[;\s]+", deps) if d]
    return links


def target_layer(target):
    """kiln_nn -> nn, kiln_nn_tests -> nn, kiln_apps -> apps; None for others."""
    m = re.fullmatch(r"kiln_([a-z]+?)(_tests)?", target)
    return m.group(1) if m and m.group(1) in RANK else None


def check_links(links, uses):
    errors = []
    kiln_links = {t: [d for d in deps if target_layer(d)] for t, deps in links.items() if target_layer(t)}
    for target, deps in sorted(kiln_links.items()):
        for d in deps:
            if target.endswith("_tests") and (target_layer(target), target_layer(d)) in TEST_EDGES:
                continue
            if RANK[target_layer(d)] > RANK[target_layer(target)]:
                errors.append(f"CMake: {target} links {d}: {target_layer(target)} -> {target_layer(d)} "
                              f"against the layer order")

    def reach(t, seen):
        for d in kiln_links.get(t, []):
            if d not in seen:
                seen.add(d)
                reach(d, seen)
        return seen

    for layer, used in sorted(uses.items()):
        lib = f"kiln_{layer}"
        if lib not in kiln_links:
            continue  # no target of its own (backend compiled into kiln_ops)
        reached = {target_layer(d) for d in reach(lib, set())}
        for dst, at in sorted(used.items()):
            owner = f"kiln_{dst}"
            if dst not in reached and owner in kiln_links:
                errors.append(f"CMake: {lib} does not link {owner}, but {at} includes a header of {dst}")
    # A library links the layers its sources include, not more: a link that no
    # include needs makes every consumer build and load the layers above it.
    for target, deps in sorted(kiln_links.items()):
        if target.endswith("_tests"):
            continue
        layer = target_layer(target)
        for d in deps:
            if RANK[target_layer(d)] < RANK[layer] and target_layer(d) not in uses.get(layer, {}):
                errors.append(f"CMake: {target} links {d}, but no {layer} source includes a "
                              f"header of {target_layer(d)}")
    return errors


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--links", help="the link graph tests/CMakeLists.txt writes (optional)")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    errors = check_folders(root)
    include_errors, uses = check_includes(root)
    errors += include_errors + check_definitions(root)
    if args.links:
        errors += check_links(read_links(args.links), uses)
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} edge(s) against the layer order " + " -> ".join(LAYERS) +
              " (docs/architecture.md, Layers)")
        return 1
    print("layer graph ok: " + " -> ".join(LAYERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
