// MetricsLog: one rank's step log in dstrain.monitor.log.path, as
//   metrics_rank<r>.csv    a header row of flat column names (CsvColumns), then
//                          one row per step; an absent timer is an empty cell
//   metrics_rank<r>.jsonl  one SampleToJson object per line
// Every line is one write(2) on an O_APPEND descriptor, so a killed job keeps
// every line it logged. An existing file is appended to (a restarted job
// continues its log); a CSV whose header differs is refused rather than mixed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/common/status.h"
#include "core/config/config.h"
#include "metrics/step_sample.h"

namespace dst::metrics {

// The CSV columns, in order: step, unix_time, the scalars, timer_<name> for
// DeepSpeed's timer names, comm_<op>_{count,bytes,seconds,bus_bandwidth},
// memory_<category>_{bytes,peak_bytes}, process_rss_bytes. Timers outside the
// fixed list are kept in the JSON-lines log only.
const std::vector<std::string> &CsvColumns();

// The timer names with a CSV column (DeepSpeed's wall_clock_breakdown names).
const std::vector<std::string> &CsvTimerNames();

class MetricsLog {
 public:
  // Creates the directory (and parents) and opens the rank's file; a CSV gets
  // its header when new. Errors are kIo naming the path and the fix.
  static Result<std::unique_ptr<MetricsLog>> Open(const MonitorLogConfig &config, int64_t rank);
  ~MetricsLog();
  MetricsLog(const MetricsLog &) = delete;
  MetricsLog &operator=(const MetricsLog &) = delete;

  // Appends one line. A failed write (full disk, ...) is kIo naming the file.
  Status Append(const StepSample &sample);

  const std::string &path() const { return path_; }

 private:
  MetricsLog(std::string path, int fd, bool csv) : path_(std::move(path)), fd_(fd), csv_(csv) {}
  Status WriteLine(const std::string &line);

  std::string path_;
  int fd_ = -1;  // owned
  bool csv_ = true;
  std::string line_;  // reused buffer
};

// One CSV row (no newline) for `sample`, in CsvColumns order.
std::string CsvRow(const StepSample &sample);

}  // namespace dst::metrics
