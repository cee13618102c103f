// What a test of layer autograd may use: the autograd headers, over ops's
// (tests/support/ops_testing.h); nothing above autograd (tools/check_layers.py
// holds each layer's tests to it).
#pragma once

#include "kiln/autograd/engine.h"
#include "kiln/autograd/functional.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/autograd/gradient_tape.h"
#include "kiln/autograd/hooks.h"
#include "tests/support/ops_testing.h"
