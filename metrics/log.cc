#include "metrics/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "metrics/monitor.h"

namespace dst::metrics {

namespace {

const char *const kFix = "set dstrain.monitor.log.path to a writable directory";

std::string ErrnoText(int err) {
  return std::error_code(err, std::generic_category()).message();
}

void AppendNumber(std::string *out, double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  out->append(buf, r.ptr);
}

void AppendNumber(std::string *out, int64_t v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

// Reads the first line of a regular, non-empty file and whether the file ends
// with a newline. False when the file cannot be read.
bool ReadHeadAndTail(const std::string &path, std::string *first_line, bool *ends_with_newline) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::getline(in, *first_line);
  in.clear();
  in.seekg(-1, std::ios::end);
  char last = '\n';
  in.get(last);
  *ends_with_newline = last == '\n';
  return true;
}

}  // namespace

const std::vector<std::string> &CsvTimerNames() {
  static const std::vector<std::string> names = {"forward",
                                                 "backward",
                                                 "backward_inner",
                                                 "backward_allreduce",
                                                 "backward_reduce_scatter",
                                                 "step",
                                                 "forward_microstep",
                                                 "backward_microstep",
                                                 "backward_inner_microstep",
                                                 "backward_allreduce_microstep",
                                                 "backward_reduce_scatter_microstep",
                                                 "step_microstep"};
  return names;
}

const std::vector<std::string> &CsvColumns() {
  static const std::vector<std::string> columns = [] {
    std::vector<std::string> c = {"step",
                                  "unix_time",
                                  "loss",
                                  "lr",
                                  "grad_norm",
                                  "loss_scale",
                                  "samples_total",
                                  "tokens_total",
                                  "skipped_steps_total",
                                  "step_seconds",
                                  "tokens_per_second",
                                  "samples_per_second",
                                  "mfu",
                                  "achieved_flops_per_second"};
    for (const std::string &t : CsvTimerNames()) c.push_back("timer_" + t);
    for (const char *op : kCommOpNames) {
      for (const char *field : {"count", "bytes", "seconds", "bus_bandwidth"}) {
        c.push_back(std::string("comm_") + op + "_" + field);
      }
    }
    for (const char *category : kMemoryCategoryNames) {
      c.push_back(std::string("memory_") + category + "_bytes");
      c.push_back(std::string("memory_") + category + "_peak_bytes");
    }
    c.push_back("process_rss_bytes");
    return c;
  }();
  return columns;
}

std::string CsvRow(const StepSample &s) {
  std::string row;
  row.reserve(1024);
  auto cell = [&](auto v) {
    if (!row.empty()) row += ',';
    AppendNumber(&row, v);
  };
  cell(s.step);
  cell(s.unix_time);
  cell(s.loss);
  cell(s.lr);
  cell(s.grad_norm);
  cell(s.loss_scale);
  cell(s.samples_total);
  cell(s.tokens_total);
  cell(s.skipped_steps_total);
  cell(s.step_seconds);
  cell(s.tokens_per_second);
  cell(s.samples_per_second);
  cell(s.mfu);
  cell(s.achieved_flops_per_second);
  for (const std::string &name : CsvTimerNames()) {
    row += ',';
    for (const auto &[timer, seconds] : s.timers) {
      if (timer == name) {
        AppendNumber(&row, seconds);
        break;
      }
    }
  }
  for (const CommOpSample &op : s.comm) {
    cell(op.count);
    cell(op.bytes);
    cell(op.seconds);
    cell(op.bus_bandwidth);
  }
  for (const MemorySample &m : s.memory) {
    cell(m.current_bytes);
    cell(m.peak_bytes);
  }
  cell(s.process_rss_bytes);
  return row;
}

Result<std::unique_ptr<MetricsLog>> MetricsLog::Open(const MonitorLogConfig &config, int64_t rank) {
  const bool csv = config.format == "csv";
  if (!csv && config.format != "jsonl") {
    return InvalidArgument("dstrain.monitor.log.format: expected \"csv\" or \"jsonl\", found \"" +
                           config.format + "\"");
  }
  if (config.path.empty()) {
    return InvalidArgument("dstrain.monitor.log.path is empty; " + std::string(kFix));
  }
  std::error_code ec;
  std::filesystem::create_directories(config.path, ec);
  if (ec) {
    return IoError("cannot create the metrics log directory '" + config.path +
                   "': " + ec.message() + "; " + kFix);
  }
  const std::string path = (std::filesystem::path(config.path) /
                            ("metrics_rank" + std::to_string(rank) + (csv ? ".csv" : ".jsonl")))
                               .string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return IoError("cannot open the metrics log '" + path + "' for writing: " + ErrnoText(errno) +
                   "; " + kFix);
  }
  std::unique_ptr<MetricsLog> log(new MetricsLog(path, fd, csv));

  // A new file gets the header; an existing one must have ours and gets its
  // last line terminated if a killed job left it half written.
  std::string header;
  for (const std::string &c : CsvColumns()) header += (header.empty() ? "" : ",") + c;
  struct stat st {};
  const bool existing = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
  if (existing) {
    std::string first;
    bool ends_with_newline = true;
    if (!ReadHeadAndTail(path, &first, &ends_with_newline)) {
      return IoError("cannot read the existing metrics log '" + path + "'; " + kFix);
    }
    if (csv && first != header) {
      return IoError("the metrics log '" + path +
                     "' exists with other columns (written by another dstrain version?); move it "
                     "away or set dstrain.monitor.log.path to another directory");
    }
    if (!ends_with_newline) DST_RETURN_IF_ERROR(log->WriteLine(""));
  } else if (csv) {
    DST_RETURN_IF_ERROR(log->WriteLine(header));
  }
  return log;
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status MetricsLog::WriteLine(const std::string &line) {
  line_.assign(line);
  line_ += '\n';
  const char *p = line_.data();
  size_t left = line_.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      return IoError("cannot write the metrics log '" + path_ + "': " + ErrnoText(err) +
                     " (disk full?); free space or " + kFix);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status MetricsLog::Append(const StepSample &sample) {
  if (csv_) return WriteLine(CsvRow(sample));
  return WriteLine(
      SampleToJson(sample).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace dst::metrics
