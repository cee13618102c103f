// Live control from outside the process (T14 over a socket, docs/live_control.md):
// a running job listens on a Unix domain socket in its run folder,
// RUN_DIR/control.sock, and answers one JSON line per connection:
//
//   -> {"command": "set", "name": "lr", "value": 0.0001}
//   <- {"applied": true, "message": "lr 0.001 -> 0.0001", "id": 3, "global_step": 120}
//   -> {"command": "status"}
//   <- {"applied": true, "state": "running", "epoch": 0, "global_step": 120, "elapsed": 4.2, "logs": {...}, ...}
//
// Commands: status, pause, resume, stop, checkpoint, evaluate, set (name,
// value). A request the server cannot read is answered {"applied": false,
// "message": ...}. `kiln control RUN_DIR ...` is the client (control_client).
#pragma once

#include <filesystem>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kiln/train/control.h"

namespace kiln::app {

/// The socket's name in a run folder.
inline constexpr const char* kControlSocket = "control.sock";

/// The answer to one request line, as the server sends it (also for tests
/// and callers that hold the Control themselves). Never throws for a bad
/// request: it is answered applied false with the reason.
nlohmann::json answer_control_request(train::Control& control, const std::string& line);

/// Listens on <run_dir>/control.sock on a thread of its own until destroyed,
/// then removes the socket. The caller holds the run folder's lock
/// (RunFolder), so a socket file already there is a stale one of a killed
/// run and is replaced. kiln::Error "[op] ..." when the socket cannot be made.
class ControlServer {
 public:
  ControlServer(const std::string& op, const std::filesystem::path& run_dir, std::shared_ptr<train::Control> control);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  void serve();

  std::filesystem::path path_;
  std::shared_ptr<train::Control> control_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: a byte written to wake_[1] ends serve()
  std::thread thread_;
};

/// Sends one request line to the job running in `run_dir` and returns its
/// answer. kiln::Error "[kiln control] ..." when no job runs there (no
/// socket, or a stale one), or the answer is not JSON.
nlohmann::json send_control_request(const std::filesystem::path& run_dir, const nlohmann::json& request);

/// The request of `kiln control RUN_DIR WORDS...`: status, pause, resume,
/// stop, checkpoint, evaluate, or set NAME=VALUE ({"command": "set", "name":
/// NAME, "value": VALUE}). kiln::Error "[kiln control] ..." for anything else
/// (the command line's usage error).
nlohmann::json control_request(const std::vector<std::string>& words);

/// Prints an answer for a person: "applied: MESSAGE" or "rejected: MESSAGE";
/// for status the state, progress, clock and logs, one per line. Returns the
/// command's exit status: 0 applied, 1 rejected.
int print_control_answer(const nlohmann::json& answer, std::ostream& out);

}  // namespace kiln::app
