// Whether ops record the autograd tape on this thread (on by default).
#pragma once

namespace kiln {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

/// Turns recording off for its lifetime: `{ NoGradGuard g; w.sub_(lr * w.grad()); }`.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// Turns recording on for its lifetime (inside a NoGradGuard, for example).
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln
