// What a test of layer io may use: the io headers, over optim's
// (tests/support/optim_testing.h); nothing above io (tools/check_layers.py
// holds each layer's tests to it).
#pragma once

#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "kiln/io/image.h"
#include "kiln/io/gguf.h"
#include "kiln/io/read_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/io/translate.h"
#include "kiln/io/weight_source.h"
#include "tests/support/optim_testing.h"
