// Live control from outside (apps/kiln/control_socket.h, `kiln control`):
// real jobs (DQN's loop and a Trainer's, in a thread; DQN as a process)
// paused, changed, checkpointed, evaluated and stopped over RUN_DIR/control.sock,
// the effects checked in their files; bad requests and command lines
// rejected with a message; a stale socket of a killed run handled.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "apps/kiln/control_socket.h"
#include "apps/kiln/lm.h"
#include "apps/kiln/rl_offpolicy.h"
#include "kiln/io/checkpoint.h"
#include "kiln/io/checkpoint_manager.h"
#include "tests/apps/cli_runner.h"
#include "tests/support/test_util.h"

namespace kiln::app {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const json kStatus = {{"command", "status"}};

json ask(const std::string& dir, const json& request) { return send_control_request(dir, request); }

// Whether the job in `dir` answers status with state `state` within 60 s.
bool reaches(const std::string& dir, const std::string& state) {
  return kiln::testing::wait_until(
      [&] {
        if (!fs::exists(dir + "/control.sock")) return false;
        try {
          return ask(dir, kStatus).value("state", "") == state;
        } catch (const Error&) {
          return false;
        }
      },
      60);
}

// A socket file with no listener, as a killed run leaves it.
void make_stale_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  ::close(fd);
}

// Runs a job on a thread; if the test leaves early, stops it over the socket
// so the join cannot hang.
class JobThread {
 public:
  JobThread(std::string dir, std::function<void()> body)
      : dir_(std::move(dir)), thread_([body = std::move(body)] {
          try {
            body();
          } catch (const std::exception& e) {
            ADD_FAILURE() << "the job threw: " << e.what();
          }
        }) {}
  ~JobThread() { join(); }
  void join() {
    if (!thread_.joinable()) return;
    for (int i = 0; i < 600 && fs::exists(dir_ + "/control.sock"); ++i) {
      try {
        ask(dir_, {{"command", "stop"}});
      } catch (const Error&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    thread_.join();
  }

 private:
  std::string dir_;
  std::thread thread_;
};

TEST(ControlSocket, SteersADqnJobBetweenUpdates) {
  const std::string dir = kiln::testing::fresh_dir();
  make_stale_socket(dir + "/control.sock");
  EXPECT_KILN_ERROR(ask(dir, kStatus), "is left over from a run that was killed");

  std::ostringstream log;  // written by the job's thread only
  OffPolicyJobResult result;
  JobThread job(dir, [&] {
    result = run_offpolicy(
        {.algo = "dqn", .total_steps = 1'000'000, .out = dir, .eval_every = 500, .eval_episodes = 1, .log = &log});
  });
  ASSERT_TRUE(reaches(dir, "running"));  // the stale socket was replaced
  // Past the first evaluation (step 500), which logs DQN's default rate.
  ASSERT_TRUE(kiln::testing::wait_until([&] { return ask(dir, kStatus).value("global_step", int64_t(0)) >= 1000; }, 60));

  json r = ask(dir, {{"command", "pause"}});
  EXPECT_EQ(r["applied"], true) << r;
  EXPECT_EQ(r["message"], "paused");
  const json paused = ask(dir, kStatus);
  EXPECT_EQ(paused["state"], "paused");
  const int64_t step = paused["global_step"].get<int64_t>();
  EXPECT_EQ(step % 250, 0) << "safe points fall every 250 steps";  // poll_every(500)
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(ask(dir, kStatus)["global_step"], step);  // it holds

  r = ask(dir, {{"command", "set"}, {"name", "lr"}, {"value", 0.0005}});
  EXPECT_EQ(r["applied"], true) << r;
  EXPECT_EQ(r["message"], "lr 0.00025 -> 0.0005");
  EXPECT_EQ(ask(dir, kStatus)["logs"]["lr"], 0.0005);
  r = ask(dir, {{"command", "set"}, {"name", "momentum"}, {"value", 0.9}});
  EXPECT_EQ(r["applied"], false);
  EXPECT_TRUE(r["message"].get<std::string>().starts_with("this job has no option 'momentum' (options: lr, "))
      << r["message"];
  r = ask(dir, {{"command", "set"}, {"name", "lr"}, {"value", -1}});
  EXPECT_EQ(r["applied"], false);
  EXPECT_NE(r["message"].get<std::string>().find("-1"), std::string::npos) << r["message"];
  r = ask(dir, {{"command", "fly"}});
  EXPECT_EQ(r["applied"], false);
  EXPECT_EQ(r["message"],
            "unknown command 'fly' (commands: status, pause, resume, stop, checkpoint, evaluate, set NAME=VALUE, "
            "request_recapture, request_rebuild)");

  r = ask(dir, {{"command", "checkpoint"}});
  EXPECT_EQ(r["applied"], true) << r;
  EXPECT_EQ(r["message"], "saved");
  EXPECT_TRUE(fs::exists(fmt::format("{}/checkpoints/step-{}.safetensors", dir, step)));
  r = ask(dir, {{"command", "evaluate"}});
  EXPECT_EQ(r["applied"], true) << r;
  EXPECT_TRUE(r["message"].get<std::string>().starts_with("evaluated (val/return: ")) << r["message"];

  EXPECT_EQ(ask(dir, {{"command", "resume"}})["message"], "resumed");
  ASSERT_TRUE(kiln::testing::wait_until(
      [&] { return ask(dir, kStatus).value("global_step", int64_t(0)) >= step + 1000; }, 60));
  r = ask(dir, {{"command", "stop"}});
  EXPECT_EQ(r["message"], "stopping");
  job.join();

  EXPECT_EQ(result.signal, 0);
  EXPECT_LT(result.global_step, 1'000'000);
  // The rows after the change log the new rate; the ones before, DQN's default.
  const std::vector<std::string> rows = kiln::testing::read_lines(dir + "/metrics.csv");
  ASSERT_GE(rows.size(), 3u);
  EXPECT_TRUE(rows[1].ends_with(",0.00025")) << rows[1];
  EXPECT_TRUE(rows.back().ends_with(",0.0005")) << rows.back();
  // The run ended: its socket is gone, and a client says so.
  EXPECT_FALSE(fs::exists(dir + "/control.sock"));
  EXPECT_KILN_ERROR(ask(dir, kStatus), "no job is running in " + dir);
  EXPECT_NE(log.str().find("never reached 475"), std::string::npos) << log.str();
}

TEST(ControlSocket, SteersATrainerJob) {
  const std::string dir = kiln::testing::fresh_dir();
  std::string text;
  while (text.size() < 20000) text += "First Citizen:\nBefore we proceed any further, hear me speak.\n\n";
  kiln::testing::write_bytes(dir + "/text.txt", text);
  const std::string out = dir + "/run";
  std::ostringstream log;
  LmResult result;
  JobThread job(out, [&] {
    result = train_lm({.data = dir + "/text.txt", .n_layer = 1, .n_head = 2, .n_embd = 32, .block_size = 16,
                       .iters = 100'000, .batch_size = 8, .lr = 1e-2, .min_lr = 1e-3, .warmup = 2,
                       .eval_interval = 100'000, .eval_iters = 2, .seed = 3, .out = out, .log = &log, .tty = false});
  });
  ASSERT_TRUE(reaches(out, "running"));
  EXPECT_EQ(ask(out, {{"command", "pause"}})["message"], "paused");
  const json s = ask(out, kStatus);
  EXPECT_EQ(s["state"], "paused");
  EXPECT_EQ(s["max_epochs"], 1);
  EXPECT_EQ(s["steps_per_epoch"], 100'000);
  EXPECT_TRUE(s["logs"].contains("loss")) << s;
  const int64_t step = s["global_step"].get<int64_t>();

  json r = ask(out, {{"command", "set"}, {"name", "weight_decay"}, {"value", 0.05}});
  EXPECT_EQ(r["message"], "weight_decay 0.1 -> 0.05") << r;
  r = ask(out, {{"command", "set"}, {"name", "betas"}, {"value", 0.9}});
  EXPECT_EQ(r["applied"], false);
  EXPECT_TRUE(r["message"].get<std::string>().starts_with("AdamW has no option 'betas' (options: lr, ")) << r;
  r = ask(out, {{"command", "checkpoint"}});
  EXPECT_EQ(r["message"], "saved") << r;
  io::CheckpointManager manager(out + "/checkpoints");
  ASSERT_TRUE(manager.latest().has_value());
  EXPECT_EQ(io::read_checkpoint_info(*manager.latest()).progress.global_step, step);
  // The first validation callback takes it: the job's train/ estimate (no val/ logs to list).
  r = ask(out, {{"command", "evaluate"}});
  EXPECT_EQ(r["message"], "evaluated") << r;
  // A stop while paused ends the run at that step.
  EXPECT_EQ(ask(out, {{"command", "stop"}})["message"], "stopping");
  job.join();
  EXPECT_EQ(result.iters, step);
  EXPECT_EQ(result.signal, 0);
  EXPECT_EQ(int64_t(kiln::testing::read_lines(out + "/metrics.csv").size()), 1 + step);
  EXPECT_FALSE(fs::exists(out + "/control.sock"));
}

TEST(ControlSocket, BadRequestsAreRejectedWithAMessage) {
  train::Control control;  // idle: no loop has begun
  auto rejected = [&](const std::string& line) {
    const json a = answer_control_request(control, line);
    EXPECT_EQ(a["applied"], false) << line;
    return a.value("message", "");
  };
  EXPECT_EQ(rejected("pause"),
            "a request is one JSON object with a \"command\" (status, pause, resume, stop, checkpoint, evaluate, set "
            "NAME=VALUE, request_recapture, request_rebuild), got 'pause'");
  EXPECT_TRUE(rejected(R"({"command": 3})").starts_with("a request is one JSON object with a \"command\""));
  EXPECT_EQ(rejected(R"({"command": "set", "name": "lr"})"),
            R"(set needs "name" (an option, e.g. "lr") and a numeric "value")");
  EXPECT_EQ(rejected(R"({"command": "set", "name": "", "value": 1})"),
            R"(set needs "name" (an option, e.g. "lr") and a numeric "value")");
  EXPECT_EQ(rejected(R"({"command": "pause"})"),
            "the job has not started training yet (state idle): send it again once status says running");
  const json status = answer_control_request(control, R"({"command": "status"})");
  EXPECT_EQ(status["applied"], true);
  EXPECT_EQ(status["state"], "idle");

  // The command line's words.
  EXPECT_EQ(control_request({"set", "lr=1e-4"}), json({{"command", "set"}, {"name", "lr"}, {"value", 1e-4}}));
  EXPECT_EQ(control_request({"evaluate"}), json({{"command", "evaluate"}}));
  EXPECT_KILN_ERROR(control_request({}), "[kiln control] no command given");
  EXPECT_KILN_ERROR(control_request({"pause", "now"}), "[kiln control] pause takes no argument, got 'now'");
  EXPECT_KILN_ERROR(control_request({"set"}), "[kiln control] set takes one NAME=VALUE, e.g. set lr=0.0001; got 0");
  EXPECT_KILN_ERROR(control_request({"set", "lr"}), "[kiln control] set takes NAME=VALUE, e.g. set lr=0.0001; got 'lr'");
  EXPECT_KILN_ERROR(control_request({"set", "=1"}), "set takes NAME=VALUE");
  EXPECT_KILN_ERROR(control_request({"set", "lr=inf"}), "[kiln control] set lr: the value must be a finite number, got 'inf'");
  EXPECT_KILN_ERROR(control_request({"set", "lr=1x"}), "the value must be a finite number, got '1x'");
  EXPECT_KILN_ERROR(control_request({"fly"}), "[kiln control] unknown command 'fly'");

  const std::string dir = kiln::testing::fresh_dir();
  EXPECT_KILN_ERROR(ask(dir + "/none", kStatus), "is not a run folder (no such folder)");
  EXPECT_KILN_ERROR(ask(dir, kStatus), "no job is running in " + dir + ": it has no control.sock");
}

TEST(ControlCli, AppliedRejectedAndUsageExitStatuses) {
  const std::string dir = kiln::testing::fresh_dir();
  const std::string out = dir + "/run";
  using kiln::testing::run_cli;
  kiln::testing::CliResult r = run_cli({"control", dir, "status"}, dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("kiln: error: [kiln control] no job is running in"), std::string::npos) << r.err;
  for (const std::vector<std::string>& usage : std::vector<std::vector<std::string>>{
           {"control", dir, "fly"}, {"control", dir, "set", "lr"}, {"control", dir, "set", "lr=abc"}, {"control", dir}}) {
    r = run_cli(usage, dir);
    EXPECT_EQ(r.status, 2) << usage.back() << ": " << r.err;
    EXPECT_TRUE(r.err.starts_with("kiln: error: ")) << r.err;
  }

  kiln::testing::CliProcess job = kiln::testing::start_cli(
      {"rl", "dqn", "cartpole", "--total-steps", "1000000", "--eval-every", "1000", "--eval-episodes", "1", "--out", out},
      dir, "job");
  ASSERT_TRUE(kiln::testing::wait_until([&] { return run_cli({"control", out, "status"}, dir).status == 0; }, 60))
      << job.err();
  r = run_cli({"control", out, "pause"}, dir);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "applied: paused\n");
  r = run_cli({"control", out, "status"}, dir);
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(r.out.starts_with("state: paused\nglobal_step: ")) << r.out;
  EXPECT_NE(r.out.find("\nlr: 0.00025\n"), std::string::npos) << r.out;
  r = run_cli({"control", out, "set", "momentum=0.9"}, dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(r.out.starts_with("rejected: this job has no option 'momentum'")) << r.out;
  r = run_cli({"control", out, "stop"}, dir);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "applied: stopping\n");
  EXPECT_EQ(job.wait(), 0) << job.err();
  EXPECT_FALSE(fs::exists(out + "/control.sock"));
}

}  // namespace
}  // namespace kiln::app
