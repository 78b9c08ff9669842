// Process-wide logging setup (spdlog to stderr). Libraries log through spdlog's
// default logger; applications call InitLogging once at start.
#pragma once

namespace spot {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

void InitLogging(LogLevel level);

}  // namespace spot
