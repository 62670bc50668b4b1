#include "core/offload/io_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/offload/async_file.h"
#include "core/offload/swap_file.h"

namespace dst {

namespace {

constexpr int64_t kBufferBytes = 32LL << 20;  // one buffer, reused by every request

// Moves the whole file once (requests of kBufferBytes, all in flight, split
// into block_size pieces with queue_depth outstanding); bytes per second,
// fdatasync included for writes.
Result<double> Pass(AsyncFile &io, IoOp op, char *buffer, int64_t file_bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t at = 0; at < file_bytes; at += kBufferBytes) {
    const size_t n = size_t(std::min(kBufferBytes, file_bytes - at));
    Result<uint64_t> t = io.Submit({op, buffer, n, at});
    if (!t.ok()) return t.status();
  }
  DST_RETURN_IF_ERROR(io.WaitAll());
  if (op == IoOp::kWrite) DST_RETURN_IF_ERROR(io.Sync());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return double(file_bytes) / std::max(seconds, 1e-9);
}

}  // namespace

Result<IoProbeReport> ProbeIo(const std::string &directory, const IoProbeOptions &options) {
  IoProbeReport report;
  report.path = directory + "/.dstrain_io_probe_" + std::to_string(::getpid());
  const int fd = OpenForDirectIo(report.path, &report.direct);
  if (fd < 0)
    return IoError("io-probe: cannot create " + report.path + ": " + std::strerror(errno) +
                   "; is " + directory + " a writable directory?");
  // The file goes whatever happens (a copy of the path: the report moves out).
  struct Cleanup {
    int fd;
    std::string path;
    ~Cleanup() {
      ::close(fd);
      ::unlink(path.c_str());
    }
  } cleanup{fd, report.path};
  const int64_t align = DirectAlignment(fd);
  report.file_bytes = (std::max<int64_t>(options.file_bytes, kBufferBytes) + kBufferBytes - 1) /
                      kBufferBytes * kBufferBytes;
  const int64_t free_bytes = FreeBytesAt(directory);
  if (free_bytes >= 0 && report.file_bytes > free_bytes)
    return IoError("io-probe: " + directory + " has " + std::to_string(free_bytes) +
                   " bytes free, the probe writes " + std::to_string(report.file_bytes) +
                   "; use --size");
  if (::fallocate(fd, 0, 0, report.file_bytes) != 0 && errno != EOPNOTSUPP)
    return IoError("io-probe: cannot preallocate " + std::to_string(report.file_bytes) +
                   " bytes in " + directory + ": " + std::strerror(errno));
  AlignedBuffer buffer(size_t(kBufferBytes), size_t(align), nullptr);
  for (int64_t i = 0; i < kBufferBytes; i += 4096) buffer.data()[i] = char(i >> 12);
  double best = -1;
  for (int64_t block : options.block_sizes)
    for (int64_t depth : options.queue_depths) {
      AioConfig aio;
      aio.block_size = block;
      aio.queue_depth = depth;
      Result<std::unique_ptr<AsyncFile>> io = OpenAsyncFile(report.path, fd, aio, options.engine);
      if (!io.ok()) return io.status();
      report.engine = io.value()->engine();
      IoProbeResult r{block, depth, 0, 0};
      Result<double> write = Pass(*io.value(), IoOp::kWrite, buffer.data(), report.file_bytes);
      if (!write.ok()) return write.status();
      Result<double> read = Pass(*io.value(), IoOp::kRead, buffer.data(), report.file_bytes);
      if (!read.ok()) return read.status();
      r.write_bytes_per_second = write.value();
      r.read_bytes_per_second = read.value();
      report.results.push_back(r);
      if (r.write_bytes_per_second + r.read_bytes_per_second > best) {
        best = r.write_bytes_per_second + r.read_bytes_per_second;
        report.best = r;
      }
    }
  return report;
}

std::string IoProbeJson(const IoProbeReport &report) {
  using Json = nlohmann::ordered_json;
  auto one = [](const IoProbeResult &r) {
    return Json{{"block_size", r.block_size},
                {"queue_depth", r.queue_depth},
                {"write_bytes_per_second", r.write_bytes_per_second},
                {"read_bytes_per_second", r.read_bytes_per_second}};
  };
  Json results = Json::array();
  for (const IoProbeResult &r : report.results) results.push_back(one(r));
  return Json{
      {"path", report.path},
      {"engine", report.engine},
      {"direct_io", report.direct},
      {"file_bytes", report.file_bytes},
      {"results", results},
      {"best", one(report.best)},
      {"suggested_config",
       {{"aio",
         {{"block_size", report.best.block_size}, {"queue_depth", report.best.queue_depth}}}}}}
      .dump(2);
}

}  // namespace dst
