// What a test of layer data may use: the data headers, over io's
// (tests/support/io_testing.h); nothing above data (tools/check_layers.py
// holds each layer's tests to it).
#pragma once

#include "kiln/data/bpe_tokenizer.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/dataset.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/data/sampler.h"
#include "kiln/data/text.h"
#include "kiln/data/tokenizer.h"
#include "tests/support/io_testing.h"
