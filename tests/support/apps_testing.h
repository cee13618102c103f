// What a test of the kiln tool's jobs (apps/kiln) may use: every layer's
// headers and helpers, through rl's (tests/support/rl_testing.h), and the jobs'
// own headers, which the tests include themselves.
#pragma once

#include "tests/support/rl_testing.h"
