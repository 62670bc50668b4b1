#include "cli_error.h"

#include <cstdio>

namespace dstrain_cli {

int ExitCodeFor(dst_status_t status) {
  switch (status) {
    case DST_OK:
      return kExitOk;
    case DST_ERR_CONFIG:
    case DST_ERR_INVALID_ARGUMENT:
    case DST_ERR_NOT_SUPPORTED:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

void Check(dst_status_t status, std::string_view doing) {
  if (status == DST_OK) return;
  std::string reason = dst_last_error();
  if (reason.empty()) reason = dst_status_string(status);
  throw CliError(ExitCodeFor(status), std::string(doing) + ": " + reason);
}

void Warn(const std::string &message) {
  std::fprintf(stderr, "dstrain: warning: %s\n", message.c_str());
}

void UsageError(const std::string &message) {
  throw CliError(kExitUsage, message);
}

}  // namespace dstrain_cli
