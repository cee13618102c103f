// Whether ops record the autograd tape on this thread (on by default).
#pragma once

namespace kiln {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

/// Sets grad mode for its lifetime, then restores the previous mode.
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~GradModeGuard() { GradMode::set_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

/// Turns recording off for its lifetime: `{ NoGradGuard g; w.sub_(lr * w.grad()); }`.
class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

/// Turns recording on for its lifetime (inside a NoGradGuard, for example).
class EnableGradGuard : public GradModeGuard {
 public:
  EnableGradGuard() : GradModeGuard(true) {}
};

}  // namespace kiln
