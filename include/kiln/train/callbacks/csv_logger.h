// CsvLogger (T5): one CSV row per optimizer step (spec 002
// CsvLoggerCallback), units in the column names:
//
//   epoch,step,global_step,loss,accuracy,lr,elapsed_s,step_ms,samples_per_s
//   1,1,1,2.30258512,0.125,0.001,0.0012,1.2,53333.3
//
//   auto csv = std::make_shared<train::CsvLogger>("run/log.csv", train::CsvLoggerOptions{.log_keys = {"val/loss"}});
//
// epoch and step are 1-based (as the progress bar prints them); loss and
// accuracy are the step's own (accuracy empty when the step does not
// classify); lr is the optimizer's (group 0) during the step; elapsed_s the
// training seconds so far; step_ms the step's wall time and samples_per_s its
// samples over it. log_keys add one column each: the key's latest value in
// Trainer::logs() when the row is written, empty while it has none. The
// epoch's last row is written at its end, after a Validation registered before
// the logger, so it carries that epoch's "val/..." values; the run's final
// validation is in the file.
//
// Rows go through a buffered FILE*, flushed at each epoch end, and flushed and
// fsynced at train end and whenever a checkpoint takes the logger's state.
// Resume: the checkpoint ("csv_logger") holds the file's length as of the
// checkpoint, the row of the step it is taken at included; resuming truncates
// the file to it (dropping rows a killed run wrote after the checkpoint) and
// appends, so the file equals an uninterrupted run's.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "kiln/io/checkpoint.h"
#include "kiln/train/callback.h"
#include "kiln/train/task.h"

namespace kiln::train {

struct CsvLoggerOptions {
  /// true: a fresh run appends to an existing file with the same header;
  /// false: a fresh run truncates it. A resumed run always continues the file.
  bool append = true;
  /// Trainer::logs() keys written as extra columns ("val/loss", "val/accuracy").
  std::vector<std::string> log_keys = {};
};

class CsvLogger : public Callback, public io::Stateful {
 public:
  explicit CsvLogger(std::string path, CsvLoggerOptions options = {});
  ~CsvLogger() override;
  CsvLogger(const CsvLogger&) = delete;
  CsvLogger& operator=(const CsvLogger&) = delete;

  void on_train_begin(Trainer& trainer) override;
  void on_step_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepResult& step) override;
  void on_epoch_end(Trainer& trainer) override;
  void on_train_end(Trainer& trainer) override;
  void checkpoint_objects(io::Checkpoint& ckpt) override;

  const std::string& path() const { return path_; }
  /// The header line, without '\n'.
  std::string header() const;
  /// Rows written (over every leg of a resumed run), the header not counted.
  int64_t rows() const { return rows_; }

  /// {"bytes": the file's length, "rows", "global_step": of the last row}. Flushes
  /// and fsyncs the file first, so the length is on disk with the checkpoint.
  io::State state() const override;
  /// Checks the file is at least that long and starts with this header; the
  /// truncation happens at once when the file is open, else when training begins.
  void load_state(const io::State& state) override;

 private:
  void open();
  void close();
  void flush(bool sync) const;
  void truncate_to(int64_t bytes);
  void write_row(const Trainer& trainer, const StepResult& step) const;
  void write_pending(const Trainer& trainer);
  void check_resumable(int64_t bytes) const;

  std::string path_;
  CsvLoggerOptions options_;
  std::FILE* file_ = nullptr;
  // mutable: state() may write the row of the step in progress (NOTE [ The row
  // of the step a checkpoint is taken at ] in csv_logger.cpp).
  mutable int64_t bytes_ = 0;  // the file's length including what sits in the FILE buffer
  mutable int64_t rows_ = 0;
  mutable int64_t last_global_step_ = -1;  // of the last row; -1: none in this run
  mutable bool in_step_ = false;           // between on_step_begin and the step's row
  mutable std::string row_;                // reused per row
  std::optional<int64_t> resume_bytes_;    // loaded before the file was opened
  bool resumed_ = false;
  const Trainer* trainer_ = nullptr;                                    // during fit
  double lr_ = 0;                                                       // the optimizer's lr at on_step_begin
  int64_t begin_count_ = 0, begin_correct_ = 0, begin_classified_ = 0;  // epoch sums at on_step_begin
  std::chrono::steady_clock::time_point step_start_{};
  // The epoch's last step: its row waits for on_epoch_end so that it carries
  // this epoch's validation values (log_keys); its duration ends here.
  mutable std::optional<StepResult> pending_;
  mutable std::optional<std::chrono::steady_clock::time_point> step_end_;
};

}  // namespace kiln::train
