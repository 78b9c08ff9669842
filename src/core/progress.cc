#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace spot {

Progress::Progress(Options options, std::FILE* out)
    : opt_(std::move(options)),
      out_(out),
      terminal_(!opt_.force_plain && ::isatty(::fileno(out)) != 0),
      begin_(std::chrono::steady_clock::now()),
      last_draw_(begin_),
      done_(opt_.start) {}

std::string Progress::FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  auto total = static_cast<int64_t>(std::llround(s));
  int64_t h = total / 3600, m = total / 60 % 60, sec = total % 60;
  if (h > 0) return fmt::format("{}h{:02}m", h, m);
  if (m > 0) return fmt::format("{}m{:02}s", m, sec);
  return fmt::format("{}s", sec);
}

std::string Progress::Line(int64_t done, std::string_view fields, bool for_terminal) const {
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin_).count();
  double rate = elapsed > 0 ? static_cast<double>(done - opt_.start) / elapsed : 0;
  std::string eta = "?";
  if (opt_.total > 0 && rate > 0) {
    eta = FormatDuration(static_cast<double>(opt_.total - done) / rate);
  }
  std::string head;
  if (opt_.total > 0) {
    double frac = std::clamp(static_cast<double>(done) / static_cast<double>(opt_.total), 0.0, 1.0);
    if (for_terminal) {
      constexpr int kWidth = 24;
      int filled = static_cast<int>(frac * kWidth);
      head = fmt::format("{} [{}{}] {:3.0f}% {}/{}", opt_.label, std::string(filled, '#'),
                         std::string(kWidth - filled, '.'), frac * 100, done, opt_.total);
    } else {
      head = fmt::format("{} {}/{} ({:.0f}%)", opt_.label, done, opt_.total, frac * 100);
    }
  } else {
    head = fmt::format("{} {}", opt_.label, done);
  }
  return fmt::format("{} {} elapsed {} eta {}", head, fields, FormatDuration(elapsed), eta);
}

void Progress::Update(int64_t done, std::string_view fields) {
  done_ = done;
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_draw_).count();
  double interval = terminal_ ? 0.1 : opt_.log_interval_s;
  if (since < interval) return;
  last_draw_ = now;
  if (terminal_) {
    fmt::print(out_, "\r\033[K{}", Line(done, fields, true));
  } else {
    fmt::print(out_, "{}\n", Line(done, fields, false));
  }
  std::fflush(out_);
}

void Progress::Finish(std::string_view fields) {
  if (terminal_) {
    fmt::print(out_, "\r\033[K{}\n", Line(done_, fields, true));
  } else {
    fmt::print(out_, "{}\n", Line(done_, fields, false));
  }
  std::fflush(out_);
}

}  // namespace spot
