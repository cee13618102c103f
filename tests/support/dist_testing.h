// What a test of layer dist may use: the dist headers, over rl's
// (tests/support/rl_testing.h); nothing above dist (tools/check_layers.py
// holds each layer's tests to it).
#pragma once

#include "kiln/dist/data_parallel.h"
#include "kiln/dist/process_group.h"
#include "tests/support/rl_testing.h"
