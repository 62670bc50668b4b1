// The one reader of config and model-spec files, used by the engine,
// dst_estimate_memory_json, LoadConfigFile and (through the C ABI) the CLI:
// it reads only a regular file of at most kMaxConfigFileBytes, so a
// directory, a FIFO or a device such as /dev/zero is refused by name instead
// of blocking or filling memory, and errors name the file and the cause.
#pragma once

#include <cstdint>
#include <string>

#include "core/common/status.h"

namespace dst {

inline constexpr int64_t kMaxConfigFileBytes = int64_t(16) << 20;

// The text of the `what` ("config", "model") file at `path`.
Result<std::string> ReadConfigFile(const std::string &path, const char *what);

// Exactly one of `text` and `path` must be non-empty: the text, or the file's.
Result<std::string> TextOrFile(const std::string &text, const std::string &path, const char *what);

}  // namespace dst
