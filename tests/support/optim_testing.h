// What a test of layer optim may use: the optim headers, over nn's
// (tests/support/nn_testing.h); nothing above optim (tools/check_layers.py
// holds each layer's tests to it).
#pragma once

#include "kiln/optim/adam.h"
#include "kiln/optim/clip.h"
#include "kiln/optim/muon.h"
#include "kiln/optim/noop.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/scheduler.h"
#include "kiln/optim/schedulers.h"
#include "kiln/optim/sgd.h"
#include "tests/support/nn_testing.h"
