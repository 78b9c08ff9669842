#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace spot {

void InitLogging(LogLevel level) {
  auto logger = spdlog::stderr_color_mt("spot");
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  switch (level) {
    case LogLevel::kDebug: logger->set_level(spdlog::level::debug); break;
    case LogLevel::kInfo: logger->set_level(spdlog::level::info); break;
    case LogLevel::kWarn: logger->set_level(spdlog::level::warn); break;
    case LogLevel::kError: logger->set_level(spdlog::level::err); break;
  }
  spdlog::set_default_logger(logger);
}

}  // namespace spot
