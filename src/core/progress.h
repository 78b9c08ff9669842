// Progress reporting for long work: a one-line bar redrawn in place when the
// output is a terminal, plain log lines every `log_interval_s` otherwise (CI
// logs, files). Not thread-safe: call from the thread doing the work.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace spot {

class Progress {
 public:
  struct Options {
    std::string label;           // shown first, e.g. "train"
    int64_t total = 0;           // units of work in all (> 0 for a bar and an ETA)
    int64_t start = 0;           // units already done when this run began (a resume)
    double log_interval_s = 10;  // plain mode: seconds between lines
    bool force_plain = false;    // plain lines even on a terminal
  };
  explicit Progress(Options options, std::FILE* out = stderr);

  // Reports that `done` units are complete; `fields` is appended ("loss 0.41").
  // Cheap when nothing needs drawing: callers may call it every step.
  void Update(int64_t done, std::string_view fields);
  // Draws the final state and ends the line.
  void Finish(std::string_view fields);

  bool terminal() const { return terminal_; }

  // "1h02m", "4m05s", "12s".
  static std::string FormatDuration(double seconds);

 private:
  std::string Line(int64_t done, std::string_view fields, bool for_terminal) const;

  Options opt_;
  std::FILE* out_;
  bool terminal_;
  std::chrono::steady_clock::time_point begin_;
  std::chrono::steady_clock::time_point last_draw_;
  int64_t done_ = 0;
};

}  // namespace spot
