// Errors of the dstrain command: a failing C call becomes a CliError that
// carries the exit code (2 for usage and config errors, 1 otherwise) and a
// message saying what the command was doing and what the library said.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "dstrain/dstrain.h"

namespace dstrain_cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInterrupted = 130;  // 128 + SIGINT

class CliError : public std::runtime_error {
 public:
  CliError(int exit_code, const std::string &message)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// 2 for DST_ERR_CONFIG, DST_ERR_INVALID_ARGUMENT and DST_ERR_NOT_SUPPORTED, else 1.
int ExitCodeFor(dst_status_t status);

// Throws a CliError "<doing>: <dst_last_error()>" when `status` is not DST_OK.
void Check(dst_status_t status, std::string_view doing);

// Prints "dstrain: warning: <message>" to stderr.
void Warn(const std::string &message);

// Throws a usage error (exit code 2).
[[noreturn]] void UsageError(const std::string &message);

}  // namespace dstrain_cli
