// What a test of layer rl may use: the rl headers, over models's
// (tests/support/models_testing.h); nothing above rl (tools/check_layers.py
// holds each layer's tests to it).
#pragma once

#include "kiln/rl/actor_critic.h"
#include "kiln/rl/cartpole.h"
#include "kiln/rl/distributions.h"
#include "kiln/rl/dqn.h"
#include "kiln/rl/env.h"
#include "kiln/rl/evaluate.h"
#include "kiln/rl/make_env.h"
#include "kiln/rl/normalization.h"
#include "kiln/rl/pendulum.h"
#include "kiln/rl/ppo.h"
#include "kiln/rl/presets.h"
#include "kiln/rl/replay_buffer.h"
#include "kiln/rl/rollout.h"
#include "kiln/rl/sac.h"
#include "tests/support/models_testing.h"
