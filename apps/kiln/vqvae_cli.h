// The command line of `kiln train vqvae fashion-mnist` (apps/kiln/vqvae.h):
// its flags in one place, so main.cpp only registers it.
#pragma once

#include <CLI/CLI.hpp>

#include "apps/kiln/run_flags.h"
#include "apps/kiln/vqvae.h"

namespace kiln::app {

struct VqvaeCommand {
  CLI::App* command = nullptr;  // parsed() when it ran
  VqvaeOptions options;
  RunFlags flags;
};

/// Adds `vqvae fashion-mnist` under `train`; `cmd` must outlive the parse.
void add_vqvae_command(CLI::App* train, VqvaeCommand& cmd);
/// After the parse, when cmd.command->parsed(): runs the job; the exit status.
int run_vqvae_command(VqvaeCommand& cmd);

}  // namespace kiln::app
