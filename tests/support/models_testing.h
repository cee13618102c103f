// What a test of layer models may use: the models headers, over train's
// (tests/support/train_testing.h); nothing above models (tools/check_layers.py
// holds each layer's tests to it).
#pragma once

#include "kiln/models/causal_lm.h"
#include "kiln/models/classifiers.h"
#include "kiln/models/generate.h"
#include "kiln/models/gpt.h"
#include "tests/support/train_testing.h"
