#include "core/common/log.h"

#include <strings.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace dst {

namespace {

std::atomic<int64_t> g_rank{-1};
std::mutex g_mu;

const char *LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

LogLevel ReadLevel() {
  const char *text = std::getenv("DSTRAIN_LOG_LEVEL");
  if (text == nullptr || *text == '\0') return LogLevel::kWarning;
  for (LogLevel level : {LogLevel::kError, LogLevel::kWarning, LogLevel::kInfo, LogLevel::kDebug})
    if (strcasecmp(text, LevelName(level)) == 0) return level;
  if (strcasecmp(text, "warn") == 0) return LogLevel::kWarning;
  std::fprintf(stderr,
               "dstrain: warning: DSTRAIN_LOG_LEVEL=\"%s\" is not a level; use error, warning, "
               "info or debug (keeping warning)\n",
               text);
  return LogLevel::kWarning;
}

}  // namespace

LogLevel CurrentLogLevel() {
  static const LogLevel level = ReadLevel();
  return level;
}

void SetLogRank(int64_t rank) {
  g_rank = rank;
}

void Log(LogLevel level, std::string_view component, const std::string &message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const int millis = int(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm local{};
  localtime_r(&seconds, &local);
  char stamp[16];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &local);
  const int64_t rank = g_rank;
  std::string rank_text = rank >= 0 ? " rank " + std::to_string(rank) : "";
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "[dstrain %s.%03d%s %s %.*s] %s\n", stamp, millis, rank_text.c_str(),
               LevelName(level), int(component.size()), component.data(), message.c_str());
}

}  // namespace dst
