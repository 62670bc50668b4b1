#include "io_probe_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_error.h"
#include "dstrain/dstrain.h"

namespace dstrain_cli {

namespace {

using json = nlohmann::json;

std::string Size(int64_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MiB"
                            : std::to_string(bytes >> 10) + " KiB";
}

void PrintTable(const json &report) {
  std::printf("io-probe of %s (%s, %s, %lld MiB a pass)\n",
              report["path"].get<std::string>().c_str(),
              report["engine"].get<std::string>().c_str(),
              report["direct_io"].get<bool>() ? "O_DIRECT"
                                              : "buffered: the file system has no O_DIRECT, "
                                                "reads may come from the page cache",
              static_cast<long long>(report["file_bytes"].get<int64_t>() >> 20));
  std::printf("  %10s  %5s  %12s  %12s\n", "block_size", "depth", "write MB/s", "read MB/s");
  const json &best = report["best"];
  for (const json &r : report["results"]) {
    const bool is_best = r == best;
    std::printf("  %10s  %5lld  %12.0f  %12.0f%s\n", Size(r["block_size"]).c_str(),
                static_cast<long long>(r["queue_depth"].get<int64_t>()),
                r["write_bytes_per_second"].get<double>() / 1e6,
                r["read_bytes_per_second"].get<double>() / 1e6, is_best ? "  <- best" : "");
  }
  std::printf("ds_config: %s\n", report["suggested_config"].dump().c_str());
}

}  // namespace

IoProbeCommand::IoProbeCommand(CLI::App &parent)
    : app_(parent.add_subcommand(
          "io-probe",
          "Measure a directory's sequential I/O for NVMe offload and suggest \"aio\"")) {
  app_->add_option("dir", dir_, "directory to probe (offload_optimizer.nvme_path)")->required();
  app_->add_option("--size", size_, "bytes written and read per setting (default 128 MiB)")
      ->check(CLI::NonNegativeNumber);
  app_->add_flag("--json", json_, "print the JSON report");
}

int IoProbeCommand::Run() {
  const char *text = nullptr;
  Check(dst_io_probe_json(dir_.c_str(), size_, &text), "probing " + dir_);
  if (json_) {
    std::printf("%s\n", text);
    return kExitOk;
  }
  PrintTable(json::parse(text));
  return kExitOk;
}

}  // namespace dstrain_cli
