// The control socket's server and client (apps/kiln/control_socket.h).
#include "apps/kiln/control_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::app {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kClient = "kiln control";
constexpr const char* kCommands =
    "status, pause, resume, stop, checkpoint, evaluate, set NAME=VALUE, request_recapture, request_rebuild";
constexpr size_t kMaxLine = 64 * 1024;  // a request is a few dozen bytes
constexpr int kAnswerSeconds = 60;      // how long the server waits for the job to apply a command

// The socket's address. sun_path holds 107 characters: a longer path is
// reached through /proc/self/fd/<fd of its folder>/control.sock, which the
// kernel resolves like any path.
struct Address {
  sockaddr_un addr{};
  int dir_fd = -1;
  explicit Address(const fs::path& socket) {
    addr.sun_family = AF_UNIX;
    std::string p = socket.string();
    if (p.size() >= sizeof(addr.sun_path)) {
      dir_fd = ::open(socket.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (dir_fd >= 0) p = fmt::format("/proc/self/fd/{}/{}", dir_fd, socket.filename().string());
    }
    std::strncpy(addr.sun_path, p.c_str(), sizeof(addr.sun_path) - 1);
  }
  ~Address() {
    if (dir_fd >= 0) ::close(dir_fd);
  }
  Address(const Address&) = delete;
  Address& operator=(const Address&) = delete;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&addr); }
};

// Reads up to the first newline (or the peer's end) within `seconds`; false on
// a timeout, an error or a line longer than kMaxLine.
bool read_line(int fd, std::string& line, int seconds) {
  line.clear();
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, seconds * 1000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return !line.empty();
    line.append(buf, size_t(n));
    if (const size_t nl = line.find('\n'); nl != std::string::npos) {
      line.resize(nl);
      return true;
    }
    if (line.size() > kMaxLine) return false;
  }
}

// MSG_NOSIGNAL: a client gone away is no SIGPIPE for the job.
void write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += size_t(n);
  }
}

json reject(std::string message) { return {{"applied", false}, {"message", std::move(message)}}; }

json status(const train::Control& control) {
  const train::Snapshot s = control.snapshot();
  json logs = json::object();
  for (const auto& [name, value] : s.logs) logs[name] = std::isfinite(value) ? json(value) : json(nullptr);
  return {{"applied", true},
          {"state", train::to_string(s.state)},
          {"epoch", s.progress.epoch},
          {"global_step", s.progress.global_step},
          {"step_in_epoch", s.progress.step_in_epoch},
          {"max_epochs", s.max_epochs},
          {"steps_per_epoch", s.steps_per_epoch},
          {"elapsed", s.elapsed},
          {"revision", s.revision},
          {"logs", logs}};
}

}  // namespace

json answer_control_request(train::Control& control, const std::string& line) {
  const json request = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object() || !request.contains("command") || !request["command"].is_string())
    return reject(fmt::format("a request is one JSON object with a \"command\" ({}), got '{}'", kCommands,
                              line.substr(0, 80)));
  const std::string name = request["command"].get<std::string>();
  if (name == "status") return status(control);
  train::Command command;
  if (name == "pause") command = train::Command::pause();
  else if (name == "resume") command = train::Command::resume();
  else if (name == "stop") command = train::Command::stop();
  else if (name == "checkpoint") command = train::Command::checkpoint();
  else if (name == "evaluate") command = train::Command::evaluate();
  else if (name == "request_recapture") command = train::Command::request_recapture();
  else if (name == "request_rebuild") command = train::Command::request_rebuild();
  else if (name == "set") {
    const json option = request.value("name", json());
    const json value = request.value("value", json());
    if (!option.is_string() || option.get<std::string>().empty() || !value.is_number())
      return reject(R"(set needs "name" (an option, e.g. "lr") and a numeric "value")");
    command = train::Command::set(option.get<std::string>(), value.get<double>());
  } else {
    return reject(fmt::format("unknown command '{}' (commands: {})", name.substr(0, 40), kCommands));
  }
  // Queued before training starts, a command would wait for the first step
  // with no answer to give: refused until the job runs.
  if (control.state() == train::RunState::idle)
    return reject("the job has not started training yet (state idle): send it again once status says running");
  const uint64_t id = control.submit(command);
  const std::optional<train::CommandResult> r = control.wait(id, std::chrono::seconds(kAnswerSeconds));
  if (!r)
    return reject(fmt::format("no answer within {} s: command {} ({}) is still queued and will be applied at the "
                              "job's next safe point",
                              kAnswerSeconds, id, train::to_string(command)));
  return {{"applied", r->applied},
          {"message", r->message},
          {"id", r->id},
          {"command", train::to_string(r->command)},
          {"global_step", r->global_step}};
}

ControlServer::ControlServer(const std::string& op, const fs::path& run_dir, std::shared_ptr<train::Control> control)
    : path_(run_dir / kControlSocket), control_(std::move(control)) {
  // The run folder is locked by this run: a socket file there is a stale one.
  std::error_code ec;
  fs::remove(path_, ec);
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  KILN_CHECK(listen_fd_ >= 0, op, "cannot create the control socket: {}", std::strerror(errno));
  const Address address(path_);
  if (::bind(listen_fd_, address.get(), sizeof(address.addr)) != 0 || ::listen(listen_fd_, 8) != 0 ||
      ::pipe2(wake_, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(listen_fd_);
    fs::remove(path_, ec);
    KILN_FAIL(op, "cannot listen on the control socket {}: {}", path_.string(), std::strerror(err));
  }
  thread_ = std::thread([this] { serve(); });
}

ControlServer::~ControlServer() {
  (void)!::write(wake_[1], "x", 1);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
  std::error_code ec;
  fs::remove(path_, ec);
}

// One connection at a time: commands are applied one after another anyway.
void ControlServer::serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string line;
    json answer = read_line(fd, line, 5) ? answer_control_request(*control_, line)
                                         : reject("no request line within 5 s (or longer than 64 KiB)");
    write_all(fd, answer.dump() + "\n");
    ::close(fd);
  }
}

json send_control_request(const fs::path& run_dir, const json& request) {
  std::error_code ec;
  KILN_CHECK(fs::is_directory(run_dir, ec), kClient, "{} is not a run folder (no such folder)", run_dir.string());
  const fs::path socket = run_dir / kControlSocket;
  KILN_CHECK(fs::exists(socket, ec), kClient,
             "no job is running in {}: it has no {} (the job has ended, has not started yet, or is not a kiln job)",
             run_dir.string(), kControlSocket);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  KILN_CHECK(fd >= 0, kClient, "cannot create a socket: {}", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const Address address(socket);
  if (::connect(fd, address.get(), sizeof(address.addr)) != 0) {
    const int err = errno;
    KILN_CHECK(err != ECONNREFUSED, kClient,
               "no job is running in {}: {} is left over from a run that was killed (the next run there replaces it)",
               run_dir.string(), socket.string());
    KILN_FAIL(kClient, "cannot connect to {}: {}", socket.string(), std::strerror(err));
  }
  write_all(fd, request.dump() + "\n");
  std::string line;
  // The server answers within kAnswerSeconds, or says why not.
  KILN_CHECK(read_line(fd, line, kAnswerSeconds + 30), kClient, "no answer from the job in {}", run_dir.string());
  json answer = json::parse(line, nullptr, /*allow_exceptions=*/false);
  KILN_CHECK(answer.is_object() && answer.contains("applied"), kClient, "the job's answer is not a kiln answer: '{}'",
             line.substr(0, 80));
  return answer;
}

json control_request(const std::vector<std::string>& words) {
  KILN_CHECK(!words.empty(), kClient, "no command given (commands: {})", kCommands);
  const std::string& name = words[0];
  const bool plain = name == "status" || name == "pause" || name == "resume" || name == "stop" ||
                     name == "checkpoint" || name == "evaluate" || name == "request_recapture" ||
                     name == "request_rebuild";
  KILN_CHECK(plain || name == "set", kClient, "unknown command '{}' (commands: {})", name, kCommands);
  if (plain) {
    KILN_CHECK(words.size() == 1, kClient, "{} takes no argument, got '{}'", name, words[1]);
    return {{"command", name}};
  }
  KILN_CHECK(words.size() == 2, kClient, "set takes one NAME=VALUE, e.g. set lr=0.0001; got {} argument{}",
             words.size() - 1, words.size() == 2 ? "" : "s");
  const std::string& assignment = words[1];
  const size_t eq = assignment.find('=');
  KILN_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < assignment.size(), kClient,
             "set takes NAME=VALUE, e.g. set lr=0.0001; got '{}'", assignment);
  const std::string value_text = assignment.substr(eq + 1);
  char* end = nullptr;
  const double value = std::strtod(value_text.c_str(), &end);
  KILN_CHECK(end == value_text.c_str() + value_text.size() && std::isfinite(value), kClient,
             "set {}: the value must be a finite number, got '{}'", assignment.substr(0, eq), value_text);
  return {{"command", "set"}, {"name", assignment.substr(0, eq)}, {"value", value}};
}

int print_control_answer(const json& answer, std::ostream& out) {
  const bool applied = answer.value("applied", false);
  if (applied && answer.contains("state")) {
    fmt::print(out, "state: {}\n", answer.value("state", ""));
    const int64_t max_epochs = answer.value("max_epochs", int64_t(0));
    if (max_epochs > 0)
      fmt::print(out, "epoch: {} of {} ({} of {} steps)\n", answer.value("epoch", int64_t(0)) + 1, max_epochs,
                 answer.value("step_in_epoch", int64_t(0)), answer.value("steps_per_epoch", int64_t(0)));
    fmt::print(out, "global_step: {}\n", answer.value("global_step", int64_t(0)));
    fmt::print(out, "elapsed: {:.1f} s\n", answer.value("elapsed", 0.0));
    const json logs = answer.value("logs", json::object());
    for (const auto& [name, value] : logs.items())
      fmt::print(out, "{}: {}\n", name, value.is_number() ? fmt::format("{:.6g}", value.get<double>()) : "nan");
    return 0;
  }
  fmt::print(out, "{}: {}\n", applied ? "applied" : "rejected", answer.value("message", ""));
  return applied ? 0 : 1;
}

}  // namespace kiln::app
