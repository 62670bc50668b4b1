// Diagnostic logging to stderr, by level, like DEEPSPEED_LOG_LEVEL:
// DSTRAIN_LOG_LEVEL=error|warning|info|debug (default warning; read once).
// debug traces the rendezvous, each process group's connection, every
// collective (group, op, bytes, seconds) and each checkpoint phase. A line:
//   [dstrain 12:00:01.234 rank 1 debug comm] allreduce dp 4096 bytes 0.12 ms
// Errors still travel as Status values; this is what happened on the way.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dst {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

// The level DSTRAIN_LOG_LEVEL selects; an unknown value is reported once and
// the default (warning) kept.
LogLevel CurrentLogLevel();
inline bool LogEnabled(LogLevel level) {
  return level <= CurrentLogLevel();
}
// This process's rank in the lines (-1 until an engine joins a job).
void SetLogRank(int64_t rank);
// Writes one line (thread-safe).
void Log(LogLevel level, std::string_view component, const std::string &message);

}  // namespace dst

// The message is built only when the level is on.
#define DST_LOG(level, component, message)                    \
  do {                                                        \
    if (::dst::LogEnabled(::dst::LogLevel::level))            \
      ::dst::Log(::dst::LogLevel::level, component, message); \
  } while (0)
