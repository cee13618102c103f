// CheckpointManager: rotation, the best checkpoint, and the folder's record
// (checkpoints.json), reconciled with the files on every open.
//
// NOTE [Save order]: a save writes, in this order, (1) the checkpoint,
// atomically; (2) the record, listing it and every older checkpoint; (3) only
// then deletes the checkpoints rotated out; (4) the record again, without them.
// A crash after (1) leaves a checkpoint the record lacks: opening adopts it as
// the newest (it is). A crash within (3) leaves recorded files that are gone:
// opening drops them. Had the record been written once, without the deleted
// ones, before deleting, a crash would leave old checkpoints unrecorded, and
// adopting them as the newest would resume from the past.
#include "kiln/io/checkpoint_manager.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "kiln/core/atomic_file.h"
#include "kiln/core/error.h"
#include "kiln/io/json_util.h"
#include "kiln/io/read_file.h"

namespace kiln::io {
namespace fs = std::filesystem;
namespace {
using kiln::detail::errno_text;

constexpr const char* kFormat = "kiln.CheckpointManager";
constexpr int64_t kVersion = 1;
constexpr const char* kPrefix = "step-";
constexpr const char* kSuffix = ".safetensors";

const char* mode_name(MetricMode m) { return m == MetricMode::min ? "min" : "max"; }

nlohmann::json metric_to_json(std::optional<double> m) { return m ? detail::double_to_json(*m) : nullptr; }

/// The inverse of metric_to_json; throws std::runtime_error on anything else.
std::optional<double> metric_from_json(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  if (std::optional<double> v = detail::double_from_json(j)) return v;
  throw std::runtime_error("metric " + detail::brief(j) + " is not a number, null, \"nan\", \"inf\" or \"-inf\"");
}

/// The step of "step-<step>.safetensors" (canonical decimal), else none.
std::optional<int64_t> step_of(const std::string& name) {
  const size_t head = std::char_traits<char>::length(kPrefix), tail = std::char_traits<char>::length(kSuffix);
  if (name.size() <= head + tail || name.compare(0, head, kPrefix) != 0 ||
      name.compare(name.size() - tail, tail, kSuffix) != 0)
    return std::nullopt;
  int64_t step = 0;
  const char* begin = name.data() + head;
  const char* end = name.data() + name.size() - tail;
  auto [ptr, ec] = std::from_chars(begin, end, step);
  if (ec != std::errc() || ptr != end || step < 0 || CheckpointManager::file_name(step) != name) return std::nullopt;
  return step;
}

}  // namespace

std::string CheckpointManager::file_name(int64_t step) { return kPrefix + std::to_string(step) + kSuffix; }

std::string CheckpointManager::path_of(int64_t step) const { return (fs::path(dir_) / file_name(step)).string(); }

CheckpointManager::CheckpointManager(std::string dir, CheckpointManagerOptions options)
    : dir_(std::move(dir)), options_(std::move(options)) {
  constexpr const char* op = "CheckpointManager";
  KILN_CHECK(!dir_.empty(), op, "the folder name is empty");
  KILN_CHECK(options_.keep_last >= 1, op, "folder '{}': keep_last is {}; it must be at least 1", dir_,
             options_.keep_last);
  KILN_CHECK(std::isfinite(options_.min_delta) && options_.min_delta >= 0, op,
             "folder '{}': min_delta is {}; it must be a finite number >= 0", dir_, options_.min_delta);
  std::error_code ec;
  fs::file_status status = fs::status(dir_, ec);
  KILN_CHECK(!fs::exists(status) || fs::is_directory(status), op, "folder '{}': exists and is not a folder", dir_);
  fs::create_directories(dir_, ec);
  KILN_CHECK(!ec, op, "folder '{}': cannot create it: {}", dir_, ec.message());
  // Checked now rather than at the first save, an epoch of training later.
  KILN_CHECK(::access(dir_.c_str(), W_OK | X_OK) == 0, op, "folder '{}' is not writable: {}", dir_, errno_text(errno));
  open_folder();
}

void CheckpointManager::open_folder() {
  constexpr const char* op = "CheckpointManager";
  const fs::path index_path = fs::path(dir_) / kIndexName;

  // ---- the record, if any ----
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    try {
      std::string text;
      try {
        text = read_file(op, index_path.string(), kMaxRecordBytes, "a checkpoint folder's record");
      } catch (const Error& e) {
        throw std::runtime_error(e.what());  // damaged, not a mismatch: rebuilt below
      }
      auto j = nlohmann::json::parse(text);
      if (!j.is_object() || j.value("format", "") != kFormat)
        throw std::runtime_error(fmt::format("\"format\" is not \"{}\"", kFormat));
      int64_t version = j.at("version").get<int64_t>();
      KILN_CHECK(version <= kVersion, op,
                 "folder '{}': {} has version {}, newer than this kiln reads ({}); update kiln", dir_, kIndexName,
                 version, kVersion);
      std::string monitor = j.at("monitor").get<std::string>(), mode = j.at("mode").get<std::string>();
      KILN_CHECK(monitor == options_.monitor && mode == mode_name(options_.mode), op,
                 "folder '{}': its checkpoints are ranked by '{}' ({}), but this manager monitors '{}' ({}); use "
                 "another folder, or the same monitor and mode",
                 dir_, monitor, mode, options_.monitor, mode_name(options_.mode));
      std::set<int64_t> seen;
      for (const auto& c : j.at("checkpoints")) {
        if (!c.at("step").is_number_integer()) throw std::runtime_error("a step is not an integer: " + detail::brief(c));
        int64_t step = c.at("step").get<int64_t>();
        if (step < 0 || !seen.insert(step).second)
          throw std::runtime_error(fmt::format("step {} is negative or listed twice", step));
        saved_.push_back({step, metric_from_json(c.at("metric"))});
      }
      const auto& b = j.at("best");
      if (!b.is_null()) {
        std::optional<double> m = metric_from_json(b.at("metric"));
        if (!m || std::isnan(*m)) throw std::runtime_error("the best metric is not a number");
        if (!b.at("step").is_number_integer()) throw std::runtime_error("the best step is not an integer");
        best_ = Best{b.at("step").get<int64_t>(), *m};
      }
    } catch (const Error&) {
      throw;  // a mismatch the user must resolve, not a damaged record
    } catch (const std::exception& e) {
      // Written atomically, the record is whole or absent; this one was damaged
      // or edited. The checkpoints themselves are still good: adopt them all.
      problems_.push_back(fmt::format("{} is unreadable ({}): rebuilt from the checkpoint files, without metrics",
                                      kIndexName, e.what()));
      saved_.clear();
      best_.reset();
    }
  }

  // ---- the files: checkpoints, and temporaries of killed saves ----
  std::set<int64_t> present;
  std::error_code list_ec;
  for (const auto& item : fs::directory_iterator(dir_, list_ec)) {
    std::string name = item.path().filename().string();
    if (auto step = step_of(name)) {
      std::error_code type_ec;
      if (item.is_regular_file(type_ec)) present.insert(*step);
      continue;
    }
    // ".<target>.tmp-<pid>-<n>" for a target this manager writes.
    size_t at = name.rfind(".tmp-");
    if (name.empty() || name[0] != '.' || at == std::string::npos || at < 1) continue;
    std::string target = name.substr(1, at - 1);
    long pid = 0;
    if ((target != kIndexName && !step_of(target)) || !kiln::detail::parse_temporary_name(name, target, pid)) continue;
    // A live writer (another manager in this process, say) is still using its temporary.
    bool dead = pid > std::numeric_limits<pid_t>::max() || (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH);
    if (dead) {
      std::error_code rm;
      fs::remove(item.path(), rm);
      problems_.push_back(rm ? fmt::format("{}: a temporary of a killed save, cannot remove it: {}", name, rm.message())
                             : fmt::format("{}: a temporary of a killed save (process {}), removed", name, pid));
    }
  }
  KILN_CHECK(!list_ec, op, "folder '{}': cannot list it: {}", dir_, list_ec.message());

  // ---- reconcile ----
  std::set<int64_t> recorded;
  std::vector<Record> kept;
  for (const Record& r : saved_) {
    recorded.insert(r.step);
    if (present.count(r.step))
      kept.push_back(r);
    else
      problems_.push_back(fmt::format("{} is in {} but not in the folder: dropped", file_name(r.step), kIndexName));
  }
  saved_ = std::move(kept);
  // Unrecorded checkpoints come from a save interrupted before its record was
  // written (NOTE [Save order]): the newest ones, in step order.
  for (int64_t step : present) {
    if (recorded.count(step)) continue;
    try {
      read_checkpoint_info(path_of(step));
    } catch (const std::exception& e) {
      problems_.push_back(
          fmt::format("{} is not in {} and is broken: skipped ({})", file_name(step), kIndexName, e.what()));
      continue;
    }
    saved_.push_back({step, std::nullopt});
    problems_.push_back(
        fmt::format("{} is not in {} (a save interrupted before the record was written?): adopted "
                    "as the newest checkpoint, without a metric",
                    file_name(step), kIndexName));
  }
}

bool CheckpointManager::is_better(double metric) const {
  return improves(metric, best_ ? best_->metric : worst_metric(options_.mode), options_.mode, options_.min_delta);
}

void CheckpointManager::recompute_best() {
  // The best of the checkpoints there are; the first saved wins a tie.
  best_.reset();
  for (const Record& r : saved_) {
    if (!r.metric) continue;
    double ref = best_ ? best_->metric
                       : (options_.mode == MetricMode::min ? std::numeric_limits<double>::infinity()
                                                           : -std::numeric_limits<double>::infinity());
    bool better = options_.mode == MetricMode::min ? *r.metric < ref : *r.metric > ref;
    if (better) best_ = Best{r.step, *r.metric};
  }
}

void CheckpointManager::write_index() const {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["monitor"] = options_.monitor;
  j["mode"] = mode_name(options_.mode);
  j["best"] = best_ ? nlohmann::ordered_json{{"step", best_->step}, {"metric", metric_to_json(best_->metric)}}
                    : nlohmann::ordered_json(nullptr);
  auto list = nlohmann::ordered_json::array();
  for (const Record& r : saved_) list.push_back({{"step", r.step}, {"metric", metric_to_json(r.metric)}});
  j["checkpoints"] = std::move(list);
  atomic_write("CheckpointManager.save", (fs::path(dir_) / kIndexName).string(), j.dump(2) + "\n");
}

std::string CheckpointManager::save(const Checkpoint& ckpt, int64_t step, std::optional<double> metric) {
  constexpr const char* op = "CheckpointManager.save";
  KILN_CHECK(step >= 0, op, "folder '{}': step {} is negative", dir_, step);
  const std::string path = path_of(step);
  ckpt.save(path);  // (1) of NOTE [Save order]; throws, naming the path, with nothing changed

  // Saving a step again replaces it, and it becomes the newest.
  auto same = std::find_if(saved_.begin(), saved_.end(), [&](const Record& r) { return r.step == step; });
  if (same != saved_.end()) saved_.erase(same);
  saved_.push_back({step, metric});
  if (best_ && best_->step == step)
    recompute_best();  // the best file was overwritten: the best is now among the others (or this one)
  else if (metric && is_better(*metric))
    best_ = Best{step, *metric};
  write_index();  // (2)

  // (3): rotate out all but the newest keep_last, and the best.
  std::vector<int64_t> doomed;
  const size_t keep_from = saved_.size() > size_t(options_.keep_last) ? saved_.size() - size_t(options_.keep_last) : 0;
  for (size_t i = 0; i < keep_from; ++i)
    if (!(options_.keep_best && best_ && best_->step == saved_[i].step)) doomed.push_back(saved_[i].step);
  if (doomed.empty()) return path;
  std::vector<std::string> failures;
  for (int64_t s : doomed) {
    // Already gone (removed by hand, or by a crashed rotation) is fine.
    if (::unlink(path_of(s).c_str()) != 0 && errno != ENOENT) {
      failures.push_back(fmt::format("'{}': {}", path_of(s), errno_text(errno)));
      continue;  // still there: stays recorded, and the next save tries again
    }
    saved_.erase(std::find_if(saved_.begin(), saved_.end(), [&](const Record& r) { return r.step == s; }));
  }
  write_index();  // (4)
  if (!failures.empty()) {
    std::string list = failures[0];
    for (size_t i = 1; i < failures.size(); ++i) list += ", " + failures[i];
    KILN_FAIL(op, "{}: saved, but cannot delete the old checkpoint {}", path, list);
  }
  return path;
}

std::optional<std::string> CheckpointManager::latest() const {
  if (saved_.empty()) return std::nullopt;
  return path_of(saved_.back().step);
}

std::optional<std::string> CheckpointManager::best() const {
  if (!best_) return std::nullopt;
  for (const Record& r : saved_)
    if (r.step == best_->step) return path_of(r.step);
  return std::nullopt;
}

std::optional<double> CheckpointManager::best_metric() const {
  if (!best_) return std::nullopt;
  return best_->metric;
}

std::vector<CheckpointManager::Entry> CheckpointManager::entries() const {
  std::vector<Entry> out;
  for (const Record& r : saved_) out.push_back({r.step, path_of(r.step), r.metric});
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.step < b.step; });
  return out;
}

bool CheckpointManager::restore_latest(Checkpoint& ckpt) const {
  std::optional<std::string> path = latest();
  if (path) ckpt.load(*path);
  return path.has_value();
}

bool CheckpointManager::restore_best(Checkpoint& ckpt) const {
  std::optional<std::string> path = best();
  if (path) ckpt.load(*path);
  return path.has_value();
}

}  // namespace kiln::io
