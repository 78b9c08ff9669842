// A small W3C WebDriver client for tests: drives a headless Chromium through
// chromedriver, both from Debian (packages `chromium` and `chromium-driver`).
//
//   SPOT_ASSIGN_OR_RETURN(auto browser, Browser::Start({}));
//   SPOT_RETURN_IF_ERROR(browser->Navigate("http://127.0.0.1:8080/"));
//   auto ready = browser->WaitFor("document.body.dataset.ready === '1'", 10);
//
// Start() runs chromedriver as a child process on a free loopback port and
// opens one session with a fresh, temporary profile. Not thread-safe: use a
// Browser from one thread at a time.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace spot::monitor {

struct BrowserOptions {
  std::string chromedriver = "/usr/bin/chromedriver";  // Debian package chromium-driver
  std::string chromium = "/usr/bin/chromium";          // Debian package chromium
  int width = 1400;                                    // window size in CSS pixels, > 0
  int height = 1800;
  // chromedriver's stdout and stderr go here (appended). Empty: a file in the
  // browser's temporary directory, removed with it.
  std::string log_path;
  // Limit for starting chromedriver and opening the session.
  double start_timeout_s = 30;
  // Limit for each WebDriver command (navigation waits for the page's load).
  double command_timeout_s = 30;
};

class Browser {
 public:
  // FailedPrecondition naming the Debian package when a binary is missing;
  // Unavailable when chromedriver or the browser does not come up in time.
  static Result<std::unique_ptr<Browser>> Start(const BrowserOptions& options);

  // Ends the session (which closes Chromium), stops chromedriver (SIGTERM,
  // then SIGKILL after a grace period) and removes the profile directory.
  virtual ~Browser() = default;

  // Loads `url` and waits for its load event.
  virtual Status Navigate(const std::string& url) = 0;

  // Runs `script` as the body of a function (so it should `return` its
  // value) with `args` as its arguments; returns the value it returned.
  // A JavaScript exception is an Internal error carrying its message.
  virtual Result<nlohmann::json> Execute(const std::string& script,
                                         const nlohmann::json& args = nlohmann::json::array()) = 0;

  // Evaluates the JavaScript expression `expression` every 50 ms until it
  // is truthy and returns that value; DeadlineExceeded with the last value
  // after `timeout_s`.
  virtual Result<nlohmann::json> WaitFor(const std::string& expression, double timeout_s) = 0;

  // Resizes the window (CSS pixels), e.g. to the page's height before a
  // screenshot.
  virtual Status SetWindowSize(int width, int height) = 0;

  // A PNG of the viewport, decoded.
  virtual Result<std::string> ScreenshotPng() = 0;

  // Messages of level SEVERE the page logged to its console (uncaught
  // errors, failed loads, console.error) since the last call.
  virtual Result<std::vector<std::string>> ConsoleErrors() = 0;
};

}  // namespace spot::monitor
