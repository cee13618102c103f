// What a test of layer train may use: the train headers and the callbacks, over data's
// (tests/support/data_testing.h); nothing above train (tools/check_layers.py
// holds each layer's tests to it).
#pragma once

#include "kiln/train/callback.h"
#include "kiln/train/callbacks/checkpoint.h"
#include "kiln/train/callbacks/csv_logger.h"
#include "kiln/train/callbacks/early_stopping.h"
#include "kiln/train/callbacks/lr_scheduler.h"
#include "kiln/train/callbacks/phase.h"
#include "kiln/train/callbacks/progress_bar.h"
#include "kiln/train/callbacks/stop_on_signal.h"
#include "kiln/train/callbacks/summary.h"
#include "kiln/train/callbacks/validation.h"
#include "kiln/train/control.h"
#include "kiln/train/distributed.h"
#include "kiln/train/metrics.h"
#include "kiln/train/signal_guard.h"
#include "kiln/train/steps.h"
#include "kiln/train/task.h"
#include "kiln/train/memory_budget.h"
#include "kiln/train/trainer.h"
#include "tests/support/data_testing.h"
