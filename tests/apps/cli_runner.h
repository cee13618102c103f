// Runs the kiln tool (build/kiln, KILN_CLI) in a child process for the tests
// of what only a whole process shows: exit statuses, stderr, signals.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/apps_testing.h"

namespace kiln::testing {

/// A started `kiln` process; its stdout and stderr go to files.
struct CliProcess {
  pid_t pid = -1;
  std::string out_path, err_path;

  /// The status a shell would report: the exit code, or 128 + the signal that killed it.
  int wait() {
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::string out() const { return read_bytes(out_path); }
  std::string err() const { return read_bytes(err_path); }
};

/// Starts `kiln args...`; its output goes to <dir>/<name>.out and .err.
inline CliProcess start_cli(const std::vector<std::string>& args, const std::string& dir,
                            const std::string& name = "kiln") {
  CliProcess p{.out_path = dir + "/" + name + ".out", .err_path = dir + "/" + name + ".err"};
  std::vector<std::string> argv_s = {KILN_CLI};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  p.pid = fork();
  if (p.pid == 0) {
    // The child: only async-signal-safe calls until exec.
    int out = open(p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return p;
}

struct CliResult {
  int status;
  std::string out, err;
};

/// Runs `kiln args...` to its end.
inline CliResult run_cli(const std::vector<std::string>& args, const std::string& dir) {
  CliProcess p = start_cli(args, dir);
  int status = p.wait();
  return {status, p.out(), p.err()};
}

/// Polls `ready` every 20 ms for up to `seconds`; whether it became true.
template <class F>
bool wait_until(F ready, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ready();
}

}  // namespace kiln::testing
