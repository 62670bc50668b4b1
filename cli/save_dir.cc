#include "save_dir.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_error.h"

namespace dstrain_cli {

namespace {

namespace fs = std::filesystem;

std::string MiB(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return text;
}

// Bytes this rank writes into one checkpoint: its optimizer state (the
// master weights included under 16 bits) and, on rank 0, the consolidated
// fp32 weights; plus 64 KiB for meta.json and the file headers.
int64_t CheckpointBytes(dst_engine_t *engine, int64_t rank) {
  const char *text = nullptr;
  Check(dst_engine_metrics_json(engine, &text), "reading the engine's memory figures");
  const nlohmann::json m = nlohmann::json::parse(text);
  const int64_t state = m.at("memory").at("optimizer_state").at("bytes").get<int64_t>();
  const int64_t weights = 4 * m.at("num_parameters").get<int64_t>();
  return state + (rank == 0 ? weights : 0) + (int64_t(64) << 10);
}

}  // namespace

void CheckSaveDir(const std::string &dir, dst_engine_t *engine, int64_t rank) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw CliError(kExitFailure, "--save " + dir + ": cannot create the directory: " +
                                     ec.message() + "; choose a directory you can write");
  if (!fs::is_directory(dir))
    throw CliError(kExitFailure, "--save " + dir + ": exists and is not a directory");
  const std::string probe =
      (fs::path(dir) / (".dstrain_write_test." + std::to_string(getpid()))).string();
  {
    std::ofstream out(probe);
    if (!out)
      throw CliError(kExitFailure, "--save " + dir + ": cannot write there (" +
                                       std::strerror(errno) + "); choose a writable directory");
  }
  fs::remove(probe, ec);
  struct statvfs fsinfo {};
  if (statvfs(dir.c_str(), &fsinfo) != 0) return;  // cannot tell: the save will say
  const int64_t free_bytes = int64_t(fsinfo.f_bavail) * int64_t(fsinfo.f_frsize);
  const int64_t needed = CheckpointBytes(engine, rank);
  if (free_bytes < needed)
    throw CliError(kExitFailure, "--save " + dir + ": " + MiB(free_bytes) +
                                     " free, but one checkpoint of this rank needs about " +
                                     MiB(needed) + "; free space or choose another directory");
}

}  // namespace dstrain_cli
