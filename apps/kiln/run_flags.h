// The flags every job of the command line takes, added and finished in one
// place: --out, --seed, --threads, --resume [latest|PATH], --overwrite and
// --override NAME[,NAME]. They bind to the job's options' fields of those
// names (out, seed, threads, resume, overwrite, overrides), whose values are
// the job's defaults:
//
//   RunFlags flags = add_run_flags(sub, o, {.seed = "seed of parameters, ...", .out = "(default: runs/ppo-<env>)"});
//   ...parse...
//   finish_run_flags(flags, o);   // --resume alone: "latest"; --override's list; --threads clamped
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "apps/kiln/cli_numbers.h"

namespace kiln::app {

/// What a job says about its common flags in --help.
struct RunFlagHelp {
  std::string seed;         // what the seed seeds
  std::string out = "";     // the default folder, as help text ("" : the option's value is shown)
  bool threads_all = true;  // --threads defaults to all cores (else to the option's value)
};

/// What finish_run_flags needs after the parse.
struct RunFlags {
  CLI::App* sub = nullptr;
  std::string op;             // "kiln rl dqn"
  // --override's value, bound by CLI11: on the heap, so RunFlags can be copied.
  std::shared_ptr<std::string> override_text = std::make_shared<std::string>();
};

/// --override lr,seed (or a bare --override: any change) as a list of names.
std::vector<std::string> override_list(const RunFlags& flags);
/// An explicit `--out ""` is a mistake, not a request for the job's default folder.
void check_out(const RunFlags& flags, const std::string& out);
/// --threads above the CPUs this process may use is clamped, with a notice.
void clamp_threads(int& threads);

template <class Options>
RunFlags add_run_flags(CLI::App* sub, const std::string& op, Options& o, const RunFlagHelp& help) {
  RunFlags flags{.sub = sub, .op = op};
  add_integer(sub, "--seed", o.seed, help.seed, 0, kMaxSeed);
  add_integer(sub, "--threads", o.threads, help.threads_all ? "threads (default: all cores)" : "threads", 1,
              kMaxThreads, !help.threads_all);
  CLI::Option* out = sub->add_option("--out", o.out,
                                     "output folder: metrics.csv, checkpoints/, control.sock while running" +
                                         (help.out.empty() ? std::string() : " " + help.out));
  if (help.out.empty()) out->capture_default_str();
  sub->add_option("--resume", o.resume, "continue from a checkpoint: latest (the newest in --out) or a path")
      ->expected(0, 1)
      ->default_str("latest");
  sub->add_flag("--overwrite", o.overwrite,
                "replace the run in --out (kept aside in --out/previous-<time>/ until the new run's first checkpoint)");
  sub->add_option("--override", *flags.override_text,
                  "with --resume: accept these changed hyper-parameters (comma-separated, e.g. lr,seed; bare: any) "
                  "and record the change in the run's checkpoints")
      ->expected(0, 1);
  return flags;
}

/// After the parse: a bare --resume means latest, --override's list, --out
/// checked, --threads clamped.
template <class Options>
void finish_run_flags(RunFlags& flags, Options& o) {
  if (flags.sub->count("--resume") > 0 && o.resume.empty()) o.resume = "latest";
  o.overrides = override_list(flags);
  check_out(flags, o.out);
  clamp_threads(o.threads);
}

}  // namespace kiln::app
