#include "comm_bench_command.h"

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli_error.h"
#include "dstrain/dstrain.h"

namespace dstrain_cli {

namespace {

using json = nlohmann::json;

void PrintTable(const json &report) {
  std::printf("# comm-bench: group %s of %lld ranks, backend %s\n",
              report["group"].get<std::string>().c_str(),
              static_cast<long long>(report["ranks"].get<int64_t>()),
              report["backend"].get<std::string>().c_str());
  std::printf("# busbw by nccl-tests' definitions; time is the slowest rank's mean\n");
  std::printf("%-15s %12s %6s %12s %13s %13s %7s\n", "op", "bytes", "iters", "time (us)",
              "algbw (GB/s)", "busbw (GB/s)", "#wrong");
  for (const json &r : report["rows"])
    std::printf("%-15s %12lld %6lld %12.1f %13.3f %13.3f %7lld\n",
                r["op"].get<std::string>().c_str(),
                static_cast<long long>(r["bytes"].get<int64_t>()),
                static_cast<long long>(r["iters"].get<int64_t>()), r["time_us"].get<double>(),
                r["algbw_GBps"].get<double>(), r["busbw_GBps"].get<double>(),
                static_cast<long long>(r["errors"].get<int64_t>()));
}

// RANK as dstrain launch, torchrun, Open MPI or Slurm set it (0 when absent).
bool IsRankZero() {
  for (const char *name : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    if (const char *value = std::getenv(name)) return std::atoll(value) == 0;
  return true;
}

}  // namespace

CommBenchCommand::CommBenchCommand(CLI::App &parent)
    : app_(parent.add_subcommand(
          "comm-bench",
          "Measure the job's collectives over message sizes (algbw, busbw as nccl-tests); run "
          "on every rank, e.g. under `dstrain launch`")) {
  app_->add_option("--config", config_path_,
                   "ds_config.json: its layout gives the groups (default: one dp group of all "
                   "ranks)");
  app_->add_option("--group", group_, "group to measure: dp, tp or pp")
      ->check(CLI::IsMember({"dp", "tp", "pp"}));
  app_->add_option("--ops", ops_,
                   "comma list of allreduce, allgather, reduce_scatter, broadcast, reduce, "
                   "sendrecv, or all");
  app_->add_option("-b,--min-bytes", min_bytes_, "smallest message (default 4096)")
      ->check(CLI::PositiveNumber);
  app_->add_option("-e,--max-bytes", max_bytes_, "largest message (default 64 MiB)")
      ->check(CLI::PositiveNumber);
  app_->add_option("-f,--factor", factor_, "size multiplier between steps (default 4)")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  app_->add_option("-n,--iters", iters_, "timed operations per size (0: 50 up to 1 MiB, 10 above)")
      ->check(CLI::NonNegativeNumber);
  app_->add_option("-w,--warmup", warmup_, "untimed operations before (default 2)")
      ->check(CLI::NonNegativeNumber);
  app_->add_flag("--json", json_, "print the JSON report");
}

int CommBenchCommand::Run() {
  std::string config;
  if (!config_path_.empty()) {
    const char *text = nullptr;
    Check(dst_config_file_read(config_path_.c_str(), &text), "reading " + config_path_);
    config = text;
  }
  const json request = {{"group", group_},         {"ops", ops_},       {"min_bytes", min_bytes_},
                        {"max_bytes", max_bytes_}, {"factor", factor_}, {"iters", iters_},
                        {"warmup", warmup_}};
  const char *report = nullptr;
  Check(dst_comm_bench_json(config.empty() ? nullptr : config.c_str(), request.dump().c_str(),
                            &report),
        "measuring the collectives");
  if (!IsRankZero()) return kExitOk;
  if (json_)
    std::printf("%s\n", report);
  else
    PrintTable(json::parse(report));
  return kExitOk;
}

}  // namespace dstrain_cli
