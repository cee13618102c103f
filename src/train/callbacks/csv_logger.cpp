// CsvLogger: rows formatted into a reused buffer and written through a
// buffered FILE*; the file's length rides in checkpoints so a resume can cut
// off what a killed run wrote after its last checkpoint.
#include "kiln/train/callbacks/csv_logger.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "kiln/core/error.h"
#include "kiln/optim/optimizer.h"
#include "kiln/train/trainer.h"

namespace kiln::train {
namespace {

constexpr const char* kOp = "CsvLogger";

std::string errno_message() { return std::strerror(errno); }

// The file's size, or -1 when it does not exist.
int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    KILN_CHECK(errno == ENOENT, kOp, "cannot stat '{}': {}", path, errno_message());
    return -1;
  }
  return static_cast<int64_t>(st.st_size);
}

std::string first_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

CsvLogger::CsvLogger(std::string path, CsvLoggerOptions options)
    : path_(std::move(path)), options_(std::move(options)) {
  KILN_CHECK(!path_.empty(), kOp, "path is empty");
  for (const std::string& key : options_.log_keys)
    KILN_CHECK(!key.empty() && key.find_first_of(",\"\n\r") == std::string::npos, kOp,
               "log key '{}' cannot be a CSV column name (empty, or has a comma, quote or newline)", key);
  row_.reserve(256);
}

CsvLogger::~CsvLogger() { close(); }

std::string CsvLogger::header() const {
  std::string h = "epoch,step,global_step,loss,accuracy,lr,elapsed_s,step_ms,samples_per_s";
  for (const std::string& key : options_.log_keys) h += "," + key;
  return h;
}

void CsvLogger::check_resumable(int64_t bytes) const {
  const int64_t size = file_ ? bytes_ : file_size(path_);
  KILN_CHECK(size >= 0, kOp, "cannot resume: '{}' does not exist (the checkpoint recorded {} bytes of it)", path_,
             bytes);
  KILN_CHECK(size >= bytes, kOp, "cannot resume: '{}' has {} bytes, the checkpoint recorded {}", path_, size, bytes);
  if (!file_) {
    const std::string h = header();
    KILN_CHECK(first_line(path_) == h, kOp, "cannot resume: '{}' does not start with the header '{}'", path_, h);
  }
}

void CsvLogger::open() {
  if (resume_bytes_) {
    // Resumed: drop what a killed run wrote after the checkpoint, then append.
    check_resumable(*resume_bytes_);
    KILN_CHECK(::truncate(path_.c_str(), *resume_bytes_) == 0, kOp, "cannot truncate '{}' to {} bytes: {}", path_,
               *resume_bytes_, errno_message());
    file_ = std::fopen(path_.c_str(), "ab");
    KILN_CHECK(file_, kOp, "cannot open '{}' for appending: {}", path_, errno_message());
    bytes_ = *resume_bytes_;
    resume_bytes_.reset();
  } else if (const int64_t size = file_size(path_); options_.append && size > 0) {
    const std::string h = header();
    const std::string found = first_line(path_);
    KILN_CHECK(found == h, kOp,
               "cannot append to '{}': its header is '{}', not '{}' (append = false starts a new file)", path_, found,
               h);
    file_ = std::fopen(path_.c_str(), "ab");
    KILN_CHECK(file_, kOp, "cannot open '{}' for appending: {}", path_, errno_message());
    bytes_ = size;
  } else {
    file_ = std::fopen(path_.c_str(), "wb");
    KILN_CHECK(file_, kOp, "cannot open '{}' for writing: {}", path_, errno_message());
    const std::string h = header() + '\n';
    std::fwrite(h.data(), 1, h.size(), file_);
    bytes_ = static_cast<int64_t>(h.size());
  }
  std::setvbuf(file_, nullptr, _IOFBF, 1 << 16);
}

void CsvLogger::flush(bool sync) const {
  if (!file_) return;
  KILN_CHECK(std::fflush(file_) == 0, kOp, "cannot write '{}': {}", path_, errno_message());
  if (sync) KILN_CHECK(::fsync(::fileno(file_)) == 0, kOp, "cannot fsync '{}': {}", path_, errno_message());
}

void CsvLogger::close() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

void CsvLogger::truncate_to(int64_t bytes) {
  flush(false);
  KILN_CHECK(::ftruncate(::fileno(file_), bytes) == 0, kOp, "cannot truncate '{}' to {} bytes: {}", path_, bytes,
             errno_message());
  std::fseek(file_, 0, SEEK_END);  // "ab" writes at the end anyway; keep the position honest
  bytes_ = bytes;
}

void CsvLogger::on_train_begin(Trainer& trainer) {
  // A checkpoint loaded before this (resume) has set the counters; a fresh run
  // starts them. The file is opened at the first step, after any resume.
  if (!resume_bytes_ && !resumed_) {
    rows_ = 0;
    last_global_step_ = -1;
  }
  resumed_ = false;
}

void CsvLogger::on_step_begin(Trainer& trainer) {
  if (!file_) open();
  lr_ = trainer.task().optimizer().lr();
  const EpochStats& e = trainer.epoch_stats();
  begin_count_ = e.count;
  begin_correct_ = e.correct;
  begin_classified_ = e.classified;
  trainer_ = &trainer;
  in_step_ = true;
  step_start_ = std::chrono::steady_clock::now();
}

void CsvLogger::write_row(const Trainer& trainer, const StepResult& step) const {
  const auto end = step_end_.value_or(std::chrono::steady_clock::now());
  const double step_s = std::chrono::duration<double>(end - step_start_).count();
  const io::Progress& p = trainer.progress();
  KILN_CHECK(last_global_step_ < 0 || p.global_step == last_global_step_ + 1, kOp,
             "'{}' ends at step {} but this is step {}: the file does not match the checkpoint resumed from", path_,
             last_global_step_, p.global_step);
  row_.clear();
  auto out = std::back_inserter(row_);
  // {} prints a double's shortest form that reads back exactly.
  fmt::format_to(out, "{},{},{},{},", p.epoch + 1, p.step_in_epoch, p.global_step, step.loss);
  if (step.correct >= 0 && step.count > 0)
    fmt::format_to(out, "{}", static_cast<double>(step.correct) / static_cast<double>(step.count));
  fmt::format_to(out, ",{},{},{},{}", lr_, trainer.elapsed(), step_s * 1e3,
                 step_s > 0 ? static_cast<double>(step.count) / step_s : 0.0);
  const auto& logs = trainer.logs();
  for (const std::string& key : options_.log_keys) {
    row_ += ',';
    if (auto it = logs.find(key); it != logs.end()) fmt::format_to(out, "{}", it->second);
  }
  row_ += '\n';
  KILN_CHECK(std::fwrite(row_.data(), 1, row_.size(), file_) == row_.size(), kOp, "cannot write '{}': {}", path_,
             errno_message());
  bytes_ += static_cast<int64_t>(row_.size());
  ++rows_;
  last_global_step_ = p.global_step;
  in_step_ = false;
}

void CsvLogger::write_pending(const Trainer& trainer) {
  if (in_step_ && pending_) write_row(trainer, *pending_);
  pending_.reset();
  step_end_.reset();
}

void CsvLogger::on_step_end(Trainer& trainer, const StepResult& step) {
  // A checkpoint taken during this step by a callback registered before this
  // one has already written the row (see state()).
  if (!in_step_) return;
  if (!options_.log_keys.empty() && trainer.progress().step_in_epoch == trainer.steps_per_epoch()) {
    pending_ = step;
    step_end_ = std::chrono::steady_clock::now();
    return;
  }
  write_row(trainer, step);
}

void CsvLogger::on_epoch_end(Trainer& trainer) {
  write_pending(trainer);
  flush(false);
}

void CsvLogger::on_train_end(Trainer& trainer) {
  // A run that completed without a step still leaves the header; a failed one
  // (perhaps failed opening this very file) touches nothing more.
  if (!file_ && !resume_bytes_ && trainer.state() != RunState::failed) open();
  if (file_) write_pending(trainer);
  flush(true);
  close();
  resumed_ = false;
  trainer_ = nullptr;
  in_step_ = false;
}

void CsvLogger::checkpoint_objects(io::Checkpoint& ckpt) { ckpt.state("csv_logger", *this); }

io::State CsvLogger::state() const {
  // NOTE [ The row of the step a checkpoint is taken at ]: a callback
  // registered before this one may save a checkpoint in its on_step_end, when
  // the step is counted but its row not written yet. The row belongs before
  // the recorded length (the resumed run starts at the next step), so it is
  // written now, from the epoch sums' change since on_step_begin (what the
  // StepResult holds), and on_step_end skips it.
  if (in_step_ && trainer_ && trainer_->progress().global_step == last_global_step_ + 1) {
    const EpochStats& e = trainer_->epoch_stats();
    StepResult step;
    step.loss = e.last_loss;
    step.count = e.count - begin_count_;
    step.correct = e.classified > begin_classified_ ? e.correct - begin_correct_ : -1;
    write_row(*trainer_, step);
    pending_.reset();
    step_end_.reset();
  }
  flush(true);
  // Before the first step of a resumed run the file is not open yet: its
  // length is still the one the checkpoint recorded.
  const int64_t bytes = resume_bytes_ ? *resume_bytes_ : bytes_;
  return {{"bytes", fmt::format("{}", bytes)},
          {"rows", fmt::format("{}", rows_)},
          {"global_step", fmt::format("{}", last_global_step_)}};
}

void CsvLogger::load_state(const io::State& state) {
  const int64_t bytes = io::state_i64(state, "bytes", kOp);
  const int64_t rows = io::state_i64(state, "rows", kOp);
  const int64_t global_step = io::state_i64(state, "global_step", kOp);
  KILN_CHECK(bytes >= 0 && rows >= 0 && global_step >= -1, kOp,
             "state has bytes {}, rows {}, global_step {}: out of range", bytes, rows, global_step);
  // bytes 0: the checkpoint was taken before this logger opened its file (no
  // step yet); the resumed run opens it as a fresh run would.
  if (bytes > 0) check_resumable(bytes);
  if (bytes == 0) {
    resume_bytes_.reset();
  } else if (file_) {
    truncate_to(bytes);
  } else {
    resume_bytes_ = bytes;
  }
  rows_ = rows;
  last_global_step_ = global_step;
  resumed_ = true;
}

}  // namespace kiln::train
