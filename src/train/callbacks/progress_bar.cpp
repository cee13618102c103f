// ProgressBar: composes the epoch line into a reused buffer and writes it
// ('\r' + line + erase-to-end-of-line on a terminal, line + '\n' otherwise).
#include "kiln/train/callbacks/progress_bar.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <ostream>

#include "kiln/core/error.h"
#include "kiln/train/callbacks/validation.h"
#include "kiln/train/trainer.h"

namespace kiln::train {
namespace {

constexpr const char* kFull = "\u2588";   // █
constexpr const char* kEmpty = "\u2591";  // ░
constexpr int kCells = 10;

void append_ms(std::string& out, double ms) {
  // One decimal (0.7); below 0.1 ms the decimals one significant digit needs
  // (0.07, 0.007), so a fast step never prints as "0.0".
  // 0.0996 -> "0.1", not "0.10": a value that rounds up to the next power of
  // ten takes one decimal fewer.
  int decimals = 1;
  if (std::isfinite(ms) && ms > 0 && ms < 0.095) {
    decimals = static_cast<int>(-std::floor(std::log10(ms)));
    if (ms >= 9.5 * std::pow(10.0, -decimals)) --decimals;
    decimals = std::min(decimals, 9);
  }
  fmt::format_to(std::back_inserter(out), "{:.{}f}", ms, decimals);
}

void append_rate(std::string& out, double per_second) {
  static constexpr const char* kSuffix[] = {"", "K", "M", "G", "T", "P"};
  int unit = 0;
  double v = per_second;
  // 999.995 would print as "1000.00": move it up a unit instead.
  while (std::isfinite(v) && std::fabs(v) >= 999.995 && unit < 5) {
    v /= 1000;
    ++unit;
  }
  fmt::format_to(std::back_inserter(out), "{:.2f}{}", v, kSuffix[unit]);
}

}  // namespace

std::string format_ms(double milliseconds) {
  std::string s;
  append_ms(s, milliseconds);
  return s;
}

std::string format_rate(double per_second) {
  std::string s;
  append_rate(s, per_second);
  return s;
}

ProgressBar::ProgressBar(ProgressBarOptions options) : options_(options) {
  KILN_CHECK(std::isfinite(options_.refresh) && options_.refresh >= 0, "ProgressBar",
             "refresh must be a finite number of seconds >= 0, got {}", options_.refresh);
  buf_.reserve(256);
}

void ProgressBar::mark_epoch_start(const Trainer& trainer) {
  const EpochStats& s = trainer.epoch_stats();
  base_steps_ = s.steps;
  base_count_ = s.count;
  base_seconds_ = trainer.epoch_elapsed();
  epoch_marked_ = true;
}

void ProgressBar::on_train_begin(Trainer& trainer) {
  epoch_marked_ = false;
  pending_ = false;
  epoch_drawn_ = false;
}

void ProgressBar::on_epoch_begin(Trainer& trainer) {
  epoch_marked_ = false;
  epoch_drawn_ = false;
}

void ProgressBar::on_step_begin(Trainer& trainer) {
  // The rates count from the first step this process runs in the epoch (after
  // a resume, epoch_stats() already holds the steps before the checkpoint).
  if (!epoch_marked_) mark_epoch_start(trainer);
}

void ProgressBar::compose(const Trainer& trainer, bool with_val, std::string& out) const {
  auto back = std::back_inserter(out);
  const auto [number, count] = trainer.epoch_label();
  const int64_t steps = trainer.steps_per_epoch();
  const int64_t step = trainer.progress().step_in_epoch;
  const EpochStats& s = trainer.epoch_stats();
  const int filled = steps > 0 ? static_cast<int>(std::clamp<int64_t>(kCells * step / steps, 0, kCells)) : 0;

  fmt::format_to(back, "epoch {}/{} {}/{} |", number, count, step, steps);
  for (int i = 0; i < kCells; ++i) out += i < filled ? kFull : kEmpty;

  const double seconds = trainer.epoch_elapsed();
  const int64_t ran = epoch_marked_ ? s.steps - base_steps_ : 0;
  const double ran_seconds = epoch_marked_ ? seconds - base_seconds_ : 0;
  const int64_t samples = epoch_marked_ ? s.count - base_count_ : 0;
  fmt::format_to(back, "| {:.2f}s · ", seconds);
  append_ms(out, ran > 0 ? ran_seconds * 1e3 / static_cast<double>(ran) : 0.0);
  out += " ms/step · ";
  append_rate(out, ran_seconds > 0 ? static_cast<double>(samples) / ran_seconds : 0.0);
  out += " sample/s";
  const double accuracy = s.accuracy();
  if (!std::isnan(accuracy)) fmt::format_to(back, " · accuracy: {:.4f}", accuracy);
  fmt::format_to(back, " · loss: {:.4f}", s.loss());
  if (with_val) {
    // Only an evaluation of this very step: a Validation registered after the
    // bar evaluates after this line is written, and its last result (also in
    // logs()) is the previous epoch's; it prints its own line anyway.
    for (const auto& cb : trainer.callbacks()) {
      const auto* v = dynamic_cast<const Validation*>(cb.get());
      if (!v || v->result().global_step != trainer.progress().global_step) continue;
      const std::string& prefix = v->options().prefix;
      fmt::format_to(back, " · {}loss: {:.4f}", prefix, v->result().loss);
      if (!std::isnan(v->result().accuracy))
        fmt::format_to(back, " · {}accuracy: {:.4f}", prefix, v->result().accuracy);
    }
  }
}

std::string ProgressBar::line(const Trainer& trainer, bool with_val) const {
  std::string s;
  compose(trainer, with_val, s);
  return s;
}

void ProgressBar::draw(Trainer& trainer, bool with_val, bool end_line) {
  buf_.clear();
  if (trainer.tty()) buf_ += '\r';
  compose(trainer, with_val, buf_);
  if (trainer.tty()) buf_ += "\x1b[K";
  if (end_line) buf_ += '\n';
  std::ostream& out = trainer.out();
  out.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
  out.flush();
}

void ProgressBar::on_step_end(Trainer& trainer, const StepResult& step) {
  pending_ = true;
  if (!trainer.tty()) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = trainer.progress().step_in_epoch >= trainer.steps_per_epoch();
  // The epoch's first step shows the line at once; then at most one redraw per
  // `refresh` seconds, and the last step always.
  if (epoch_drawn_ && !last && now - last_draw_ < std::chrono::duration<double>(options_.refresh)) return;
  epoch_drawn_ = true;
  last_draw_ = now;
  draw(trainer, /*with_val=*/false, /*end_line=*/false);
}

void ProgressBar::on_epoch_end(Trainer& trainer) {
  draw(trainer, /*with_val=*/true, /*end_line=*/true);
  pending_ = false;
}

void ProgressBar::on_train_end(Trainer& trainer) {
  // A run that stopped mid-epoch (max_steps, a stop command, an error) still
  // ends its line.
  if (pending_) draw(trainer, /*with_val=*/false, /*end_line=*/true);
  pending_ = false;
}

}  // namespace kiln::train
