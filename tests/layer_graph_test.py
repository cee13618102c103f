#!/usr/bin/env python3
"""tools/check_layers.py's own tests: a small tree that follows the layer order
passes, and each kind of bad edge planted in it is caught, named by file:line
and the edge. Run by ctest (Layers.check_layers_py); stdlib only."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import check_layers  # noqa: E402

# A clean tree: one public header, one source and one test per layer used,
# each including only downwards.
CLEAN = {
    "include/kiln/core/tensor.h": "#pragma once\nclass Tensor {\n public:\n  Tensor view() const;\n};\n",
    "include/kiln/kiln.h": '#include "kiln/core/tensor.h"\n#include "kiln/nn/module.h"\n',
    "src/core/tensor.cpp": '#include "kiln/core/tensor.h"\n#include "src/core/impl.h"\n',
    "src/core/impl.h": "#pragma once\n",
    "include/kiln/ops/shape.h": '#pragma once\n#include "kiln/core/tensor.h"\n',
    "src/ops/shape.cpp": '#include "kiln/ops/shape.h"\n#include "src/ops/cpu/copy.h"\n'
                         "Tensor Tensor::view() const { return {}; }\n",
    "src/ops/cpu/copy.h": '#pragma once\n#include "kiln/core/tensor.h"\n',
    "include/kiln/autograd/engine.h": '#pragma once\n#include "kiln/ops/shape.h"\n',
    "include/kiln/nn/module.h": '#pragma once\n#include "kiln/autograd/engine.h"\n',
    "src/nn/module.cpp": '#include "kiln/nn/module.h"\n#include "private.h"\n',
    "src/nn/private.h": "#pragma once\n",
    "include/kiln/io/checkpoint.h": '#pragma once\n#include "kiln/nn/module.h"\n',
    "src/io/checkpoint.cpp": '#include "kiln/io/checkpoint.h"\n',
    "tests/support/test_util.h": '#pragma once\n#include "kiln/core/tensor.h"\n',
    "tests/support/ops_testing.h": '#pragma once\n#include "kiln/autograd/engine.h"\n',
    "tests/core/tensor_test.cpp": '#include "tests/support/test_util.h"\n',
    "tests/ops/shape_test.cpp": '#include "tests/support/ops_testing.h"\n#include "src/ops/cpu/copy.h"\n',
    "tests/nn/module_test.cpp": '#include "kiln/nn/module.h"\n#include "tests/nn/helper.h"\n',
    "tests/nn/helper.h": "#pragma once\n",
    "tests/consumer/main.cpp": '#include "kiln/kiln.h"\n',
    "tests/fuzz/checkpoint_fuzz.cpp": '#include "src/nn/private.h"\n',
    "apps/kiln/main.cpp": '#include "kiln/kiln.h"\n',
}
LINKS = ("kiln_core: fmt::fmt;$<BUILD_INTERFACE:kiln_options>\n"
         "kiln_ops: kiln_core\nkiln_autograd: kiln_ops\nkiln_nn: kiln_autograd\nkiln_io: kiln_nn\n"
         "kiln_apps: kiln_io\nkiln_core_tests: kiln_core;GTest::gtest_main\nkiln_ops_tests: kiln_autograd\n"
         "kiln_nn_tests: kiln_nn\n")


class Tree:
    """A scratch repository: CLEAN, with some files replaced or added."""

    def __init__(self, changes=None, links=LINKS):
        self.dir = tempfile.TemporaryDirectory()
        files = dict(CLEAN)
        files.update(changes or {})
        for rel, text in files.items():
            path = os.path.join(self.dir.name, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write(text)
        self.links = os.path.join(self.dir.name, "links.txt")
        with open(self.links, "w") as fh:
            fh.write(links)

    def check(self):
        """(exit status, printed lines) of the checker over this tree."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = check_layers.main(["--root", self.dir.name, "--links", self.links])
        self.dir.cleanup()
        return rc, out.getvalue().splitlines()


class LayerGraph(unittest.TestCase):
    def assert_caught(self, changes, expected, links=LINKS):
        rc, lines = Tree(changes, links).check()
        self.assertEqual(rc, 1, lines)
        self.assertTrue(any(line.startswith(expected) or expected in line for line in lines),
                        f"expected {expected!r} in:\n" + "\n".join(lines))
        self.assertEqual(len(lines), 2, lines)  # the one planted edge and the summary

    def test_clean_tree_passes(self):
        rc, lines = Tree().check()
        self.assertEqual(rc, 0, lines)
        self.assertTrue(lines[-1].startswith("layer graph ok: core -> backend -> ops"))

    def test_public_header_including_a_higher_layer(self):
        self.assert_caught({"include/kiln/core/shape.h": '#pragma once\n\n#include "kiln/nn/module.h"\n'},
                           "include/kiln/core/shape.h:3: core -> nn against the layer order: "
                           "includes include/kiln/nn/module.h")

    def test_angle_brackets_and_relative_includes_count(self):
        self.assert_caught({"src/ops/unary.cpp": "#include <kiln/io/checkpoint.h>\n"},
                           "src/ops/unary.cpp:1: ops -> io against the layer order")
        self.assert_caught({"src/io/save.cpp": '#include "../nn/private.h"\n'},
                           "src/io/save.cpp:1: io -> nn: includes src/nn/private.h, private to nn")

    def test_private_header_of_a_lower_layer(self):
        # data including io's src/ headers: below it, but not io's interface.
        self.assert_caught({"src/data/tokenizer.cpp": '#include "src/io/checkpoint.cpp"\n'},
                           "src/data/tokenizer.cpp:1: data -> io: includes src/io/checkpoint.cpp, private to io")

    def test_kernel_folders_are_the_interface_of_the_layers_above(self):
        # src/backend's headers are what ops and optim call: not private to it.
        moved = {"src/backend/cpu/copy.h": '#pragma once\n#include "kiln/core/tensor.h"\n',
                 "src/ops/shape.cpp": '#include "src/backend/cpu/copy.h"\nTensor Tensor::view() const { return {}; }\n',
                 "src/optim/adam.cpp": '#include "src/backend/cpu/copy.h"\n',
                 "tests/ops/shape_test.cpp": '#include "src/backend/cpu/copy.h"\n'}
        rc, lines = Tree(moved).check()
        self.assertEqual(rc, 0, lines)
        # A kernel that reaches up into the ops is caught.
        self.assert_caught(dict(moved, **{"src/backend/cpu/matmul.h": '#include "kiln/ops/shape.h"\n'}),
                           "src/backend/cpu/matmul.h:1: backend -> ops against the layer order")
        # Any other src/ folder stays private to its layer.
        self.assert_caught({"src/optim/adam.cpp": '#include "src/ops/cpu/copy.h"\n'},
                           "src/optim/adam.cpp:1: optim -> ops: includes src/ops/cpu/copy.h, private to ops")

    def test_umbrella_outside_programs(self):
        self.assert_caught({"tests/nn/module_test.cpp": '#include "kiln/kiln.h"\n'},
                           "tests/nn/module_test.cpp:1: includes the umbrella kiln/kiln.h")
        self.assert_caught({"src/io/checkpoint.cpp": '#include "kiln/kiln.h"\n'},
                           "src/io/checkpoint.cpp:1: includes the umbrella kiln/kiln.h")

    def test_tests_are_held_to_their_layer(self):
        self.assert_caught({"tests/core/tensor_test.cpp": '#include "kiln/ops/shape.h"\n'},
                           "tests/core/tensor_test.cpp:1: core -> ops against the layer order")
        # A layer's test helpers are its own: another layer's tests may not use them.
        self.assert_caught({"tests/io/save_test.cpp": '#include "tests/nn/helper.h"\n'},
                           "tests/io/save_test.cpp:1: io -> nn: includes tests/nn/helper.h, private to nn")
        # tests/support/<layer>_*: that layer's helpers.
        self.assert_caught({"tests/support/nn_testing.h": '#include "kiln/io/checkpoint.h"\n'},
                           "tests/support/nn_testing.h:1: nn -> io against the layer order")

    def test_the_ops_tests_may_run_the_engine_and_nothing_else_above(self):
        rc, lines = Tree({"tests/ops/grad_test.cpp": '#include "kiln/autograd/engine.h"\n'}).check()
        self.assertEqual(rc, 0, lines)
        self.assert_caught({"tests/ops/grad_test.cpp": '#include "kiln/nn/module.h"\n'},
                           "tests/ops/grad_test.cpp:1: ops -> nn against the layer order")
        self.assert_caught({"src/ops/grad.cpp": '#include "kiln/autograd/engine.h"\n'},
                           "src/ops/grad.cpp:1: ops -> autograd against the layer order")

    def test_folder_that_is_no_layer(self):
        self.assert_caught({"src/utils/strings.cpp": "int x;\n"},
                           "src/utils/strings.cpp: in folder 'utils', which is no layer")

    def test_member_of_a_lower_layers_class_defined_above(self):
        self.assert_caught({"src/nn/module.cpp": "Tensor Tensor::grad() const { return {}; }\n"},
                           "src/nn/module.cpp:1: core -> nn: defines Tensor::grad, a member of core's Tensor")
        # The allowed shorthands, only from the layer allowed to define them.
        self.assert_caught({"src/nn/module.cpp": "Tensor Tensor::view() const { return {}; }\n"},
                           "src/nn/module.cpp:1: core -> nn: defines Tensor::view")
        # A call is no definition.
        rc, lines = Tree({"src/nn/module.cpp": "Tensor f() {\n  return Tensor::make();\n}\n"}).check()
        self.assertEqual(rc, 0, lines)

    def test_links_against_the_order(self):
        self.assert_caught({}, "CMake: kiln_core_tests links kiln_ops: core -> ops against the layer order",
                           links=LINKS.replace("kiln_core_tests: kiln_core;", "kiln_core_tests: kiln_ops;"))
        self.assert_caught({}, "CMake: kiln_nn links kiln_io: nn -> io against the layer order",
                           links=LINKS.replace("kiln_nn: kiln_autograd", "kiln_nn: kiln_autograd;kiln_io"))

    def test_links_missing_or_unused(self):
        rc, lines = Tree({}, LINKS.replace("kiln_io: kiln_nn", "kiln_io: kiln_ops")).check()
        self.assertEqual(rc, 1, lines)
        self.assertIn("CMake: kiln_io does not link kiln_nn, but include/kiln/io/checkpoint.h:2 includes a header "
                      "of nn", lines)
        self.assertIn("CMake: kiln_io links kiln_ops, but no io source includes a header of ops", lines)


if __name__ == "__main__":
    unittest.main()
