// `dstrain io-probe DIR`: the sequential write and read bandwidth of the file
// system under DIR through the NVMe tier's own I/O path (the same AsyncFile,
// O_DIRECT where the file system has it), for a few aio block sizes and
// queue depths, in seconds, and the aio settings that did best. DeepSpeed
// needs a separate ds_nvme_tune run whose output keys are not its config's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/status.h"

namespace dst {

struct IoProbeOptions {
  int64_t file_bytes = 128LL << 20;  // written, then read, once per setting
  std::vector<int64_t> block_sizes = {128LL << 10, 1LL << 20, 8LL << 20};
  std::vector<int64_t> queue_depths = {1, 8, 32};
  std::string engine = "auto";
};

struct IoProbeResult {
  int64_t block_size = 0, queue_depth = 0;
  double write_bytes_per_second = 0, read_bytes_per_second = 0;
};

struct IoProbeReport {
  std::string path;  // the probe's file (removed afterwards)
  std::string engine;
  bool direct = false;
  int64_t file_bytes = 0;
  std::vector<IoProbeResult> results;
  IoProbeResult best;  // the highest sum of write and read bandwidth
};

Result<IoProbeReport> ProbeIo(const std::string &directory, const IoProbeOptions &options);

// {path, engine, direct_io, file_bytes, results: [...], best: {...},
//  suggested_config: {"aio": {"block_size", "queue_depth"}}}.
std::string IoProbeJson(const IoProbeReport &report);

}  // namespace dst
