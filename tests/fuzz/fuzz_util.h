// Shared by the fuzz targets: a scratch directory of this process where an
// input becomes the file a reader opens, and the split of one input into parts.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace dst::fuzz {

// A directory of this process, made once, under /dev/shm when there is one
// (the inputs are rewritten thousands of times a second).
inline const std::string &ScratchDir() {
  static const std::string dir = [] {
    std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string pattern = base + "/dstrain-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    return pattern;
  }();
  return dir;
}

inline std::string WriteFile(const std::string &name, std::string_view bytes) {
  const std::string path = ScratchDir() + "/" + name;
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return path;
}

// The input cut at each occurrence of `separator` into at most `parts` parts
// (the last keeps the rest): lets one input hold several files.
inline std::vector<std::string_view> Split(const uint8_t *data, size_t size,
                                           std::string_view separator, size_t parts) {
  std::vector<std::string_view> out;
  std::string_view rest(reinterpret_cast<const char *>(data), size);
  while (out.size() + 1 < parts) {
    const size_t at = rest.find(separator);
    if (at == std::string_view::npos) break;
    out.push_back(rest.substr(0, at));
    rest.remove_prefix(at + separator.size());
  }
  out.push_back(rest);
  while (out.size() < parts) out.emplace_back();
  return out;
}

}  // namespace dst::fuzz
