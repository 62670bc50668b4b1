// metrics/: the registry (series, labels, counter deltas, exposition), the
// step history, the CSV / JSON-lines log and its errors, the JSON shapes, and
// promtool's verdict on the exposition.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "metrics/history.h"
#include "metrics/log.h"
#include "metrics/monitor.h"
#include "metrics/registry.h"

namespace dst::metrics {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the test temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::path(::testing::TempDir()) / "dstrain_metrics_XXXXXX").string();
    path_ = mkdtemp(pattern.data()) ? pattern : std::string();
    EXPECT_FALSE(path_.empty()) << "mkdtemp failed under " << ::testing::TempDir();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

RankIdentity Identity() {
  RankIdentity id;
  id.job = "unit_job";
  id.rank = 3;
  id.local_rank = 1;
  id.world_size = 8;
  id.dp_rank = 1;
  id.tp_rank = 1;
  id.pp_rank = 0;
  return id;
}

// A plausible step `step` of a GPT run with ZeRO-2 (totals grow with step).
StepSample Sample(int64_t step) {
  StepSample s;
  s.step = step;
  s.samples_total = 16 * step;
  s.tokens_total = 16 * 128 * step;
  s.loss = 4.0 - 0.01 * static_cast<double>(step);
  s.lr = 1e-4 * static_cast<double>(step) / 100.0;
  s.grad_norm = 1.5;
  s.loss_scale = 65536;
  s.skipped_steps_total = step / 10;
  s.offload_read_bytes_total = 3 << 20;
  s.offload_write_bytes_total = 5 << 20;
  s.offload_io_wait_seconds_total = 0.25;
  s.step_seconds = 0.3;
  s.tokens_per_second = 16 * 128 / 0.3;
  s.samples_per_second = 16 / 0.3;
  s.mfu = 0.42;
  s.achieved_flops_per_second = 4.2e10;
  s.timers = {{"forward", 0.1},         {"backward", 0.15},
              {"backward_inner", 0.12}, {"backward_reduce_scatter", 0.03},
              {"step", 0.05},           {"forward_microstep", 0.025}};
  // The tensor-parallel group's share: a quarter of each op.
  for (size_t i = 0; i < s.comm.size(); ++i) {
    s.comm_by_group[1][i].count = step * static_cast<int64_t>(i + 1);
    s.comm_by_group[1][i].bytes = step * (1 << 18) * static_cast<int64_t>(i + 1);
    s.comm_by_group[1][i].bus_bandwidth = 2e9;
  }
  for (size_t i = 0; i < s.comm.size(); ++i) {
    s.comm[i].count = step * static_cast<int64_t>(i + 1);
    s.comm[i].bytes = step * (1 << 20) * static_cast<int64_t>(i + 1);
    s.comm[i].seconds = 0.01 * static_cast<double>(step * static_cast<int64_t>(i + 1));
    s.comm[i].bus_bandwidth = 1e9 * static_cast<double>(i + 1);
  }
  for (size_t i = 0; i < s.memory.size(); ++i) {
    s.memory[i].current_bytes = (1 << 20) * static_cast<int64_t>(i + 1);
    s.memory[i].peak_bytes = (2 << 20) * static_cast<int64_t>(i + 1);
  }
  s.process_rss_bytes = 512 << 20;
  s.unix_time = 1.7e9 + static_cast<double>(step);
  return s;
}

std::unique_ptr<Monitor> MakeMonitor(const MonitorConfig &config = {}) {
  MonitorOptions options;
  options.config = config;
  options.identity = Identity();
  auto monitor = Monitor::Create(options);
  EXPECT_TRUE(monitor.ok()) << monitor.status().message();
  return monitor.ok() ? std::move(monitor).value() : nullptr;
}

// One sample line of the exposition: name, labels, value.
struct SeriesLine {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the text format's sample lines strictly (our label values need no
// escapes); a line that does not parse fails the test.
std::vector<SeriesLine> ParseExposition(const std::string &text) {
  static const std::regex line_re(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$)");
  static const std::regex label_re(R"(([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)\",?)");
  std::vector<SeriesLine> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) {
      ADD_FAILURE() << "exposition line does not parse: " << line;
      continue;
    }
    SeriesLine s;
    s.name = m[1];
    const std::string labels = m[3];
    for (auto it = std::sregex_iterator(labels.begin(), labels.end(), label_re);
         it != std::sregex_iterator(); ++it) {
      s.labels[(*it)[1]] = (*it)[2];
    }
    s.value = std::stod(m[4]);
    out.push_back(std::move(s));
  }
  return out;
}

// The value of the one series `name` whose labels include `labels`.
std::optional<double> Value(const std::string &text, const std::string &name,
                            const std::map<std::string, std::string> &labels = {}) {
  std::optional<double> found;
  for (const SeriesLine &s : ParseExposition(text)) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto &[k, v] : labels) {
      auto it = s.labels.find(k);
      match = match && it != s.labels.end() && it->second == v;
    }
    if (!match) continue;
    EXPECT_FALSE(found) << "more than one series " << name << " matches";
    found = s.value;
  }
  return found;
}

std::vector<std::string> ReadLines(const std::string &path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> Split(const std::string &line, char sep) {
  std::vector<std::string> cells;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, sep)) cells.push_back(cell);
  if (!line.empty() && line.back() == sep) cells.push_back("");
  return cells;
}

const std::vector<std::string> kCounters = {"dstrain_steps_total",
                                            "dstrain_samples_total",
                                            "dstrain_tokens_total",
                                            "dstrain_skipped_steps_total",
                                            "dstrain_timer_seconds_total",
                                            "dstrain_comm_operations_total",
                                            "dstrain_comm_bytes_total",
                                            "dstrain_comm_seconds_total",
                                            "dstrain_comm_group_operations_total",
                                            "dstrain_comm_group_bytes_total",
                                            "dstrain_comm_group_seconds_total",
                                            "dstrain_offload_io_bytes_total",
                                            "dstrain_offload_io_wait_seconds_total"};
const std::vector<std::string> kGauges = {"dstrain_loss",
                                          "dstrain_learning_rate",
                                          "dstrain_grad_norm",
                                          "dstrain_loss_scale",
                                          "dstrain_step_time_seconds",
                                          "dstrain_tokens_per_second",
                                          "dstrain_samples_per_second",
                                          "dstrain_mfu_ratio",
                                          "dstrain_achieved_flops_per_second",
                                          "dstrain_timer_seconds",
                                          "dstrain_comm_bus_bandwidth_bytes_per_second",
                                          "dstrain_comm_group_bus_bandwidth_bytes_per_second",
                                          "dstrain_memory_bytes",
                                          "dstrain_memory_peak_bytes",
                                          "dstrain_process_resident_memory_bytes",
                                          "dstrain_world_size",
                                          "dstrain_offload_info",
                                          "dstrain_last_step_timestamp_seconds"};

TEST(MetricsRegistry, EverySeriesWithRankLabelsAfterStep) {
  auto monitor = MakeMonitor();
  ASSERT_TRUE(monitor);
  ASSERT_TRUE(monitor->OnStep(Sample(1)).ok());
  const std::string text = monitor->PrometheusText();

  std::map<std::string, std::string> types;  // from "# TYPE name type"
  std::set<std::string> helped;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string hash, kind, name, rest;
    words >> hash >> kind >> name;
    if (hash == "#" && kind == "TYPE") words >> types[name];
    if (hash == "#" && kind == "HELP" && std::getline(words, rest) && rest.size() > 10) {
      helped.insert(name);
    }
  }
  for (const auto &name : kCounters) {
    EXPECT_EQ(types[name], "counter") << name;
    EXPECT_TRUE(helped.count(name)) << name << " has no help text";
  }
  for (const auto &name : kGauges) {
    EXPECT_EQ(types[name], "gauge") << name;
    EXPECT_TRUE(helped.count(name)) << name << " has no help text";
  }

  const std::map<std::string, std::string> rank = {
      {"job", "unit_job"}, {"rank", "3"}, {"dp_rank", "1"}, {"tp_rank", "1"}, {"pp_rank", "0"}};
  const auto series = ParseExposition(text);
  ASSERT_FALSE(series.empty());
  std::set<std::string> names;
  for (const SeriesLine &s : series) {
    names.insert(s.name);
    for (const auto &[k, v] : rank) EXPECT_EQ(s.labels.count(k) ? s.labels.at(k) : "", v) << s.name;
  }
  for (const auto &name : kCounters) EXPECT_TRUE(names.count(name)) << name;
  for (const auto &name : kGauges) EXPECT_TRUE(names.count(name)) << name;

  EXPECT_EQ(Value(text, "dstrain_loss"), 3.99);
  EXPECT_EQ(Value(text, "dstrain_world_size"), 8);
  EXPECT_EQ(Value(text, "dstrain_offload_info",
                  {{"tier", "optimizer"}, {"device", "none"}, {"moved", "false"}}),
            1);
  EXPECT_EQ(Value(text, "dstrain_offload_io_bytes_total", {{"op", "read"}}), 3 << 20);
  EXPECT_EQ(Value(text, "dstrain_offload_io_bytes_total", {{"op", "write"}}), 5 << 20);
  EXPECT_EQ(Value(text, "dstrain_offload_io_wait_seconds_total"), 0.25);
  EXPECT_EQ(Value(text, "dstrain_mfu_ratio"), 0.42);
  EXPECT_EQ(Value(text, "dstrain_loss_scale"), 65536);
  EXPECT_EQ(Value(text, "dstrain_timer_seconds", {{"timer", "forward"}}), 0.1);
  EXPECT_EQ(Value(text, "dstrain_comm_bytes_total", {{"op", "allreduce"}}), 1 << 20);
  EXPECT_EQ(Value(text, "dstrain_comm_bus_bandwidth_bytes_per_second", {{"op", "allgather"}}), 4e9);
  EXPECT_EQ(Value(text, "dstrain_memory_bytes", {{"category", "optimizer_state"}}), 3 << 20);
  EXPECT_EQ(Value(text, "dstrain_memory_peak_bytes", {{"category", "parameters"}}), 2 << 20);
  EXPECT_EQ(Value(text, "dstrain_process_resident_memory_bytes"), 512 << 20);
  EXPECT_EQ(Value(text, "dstrain_last_step_timestamp_seconds"), 1.7e9 + 1);
  EXPECT_EQ(Value(text, "dstrain_comm_group_bytes_total", {{"group", "tp"}, {"op", "allreduce"}}),
            1 << 18);
  EXPECT_EQ(Value(text, "dstrain_comm_group_bus_bandwidth_bytes_per_second",
                  {{"group", "tp"}, {"op", "allgather"}}),
            2e9);
  // Every op and category has its series.
  for (const char *op : kCommOpNames) {
    EXPECT_TRUE(Value(text, "dstrain_comm_operations_total", {{"op", op}})) << op;
    EXPECT_TRUE(Value(text, "dstrain_comm_group_operations_total", {{"group", "tp"}, {"op", op}}))
        << op;
  }
  for (const char *category : kMemoryCategoryNames) {
    EXPECT_TRUE(Value(text, "dstrain_memory_bytes", {{"category", category}})) << category;
  }
}

TEST(MetricsRegistry, NoStepGaugesBeforeTheFirstStep) {
  auto monitor = MakeMonitor();
  ASSERT_TRUE(monitor);
  const std::string text = monitor->PrometheusText();
  EXPECT_EQ(Value(text, "dstrain_steps_total"), 0);
  EXPECT_EQ(Value(text, "dstrain_world_size"), 8);
  EXPECT_FALSE(Value(text, "dstrain_loss")) << "a loss of 0 before any step would be a lie";
  EXPECT_EQ(monitor->SnapshotJson()["sample"], nullptr);
}

TEST(MetricsRegistry, CountersAdvanceByTheDifferenceOfTotals) {
  auto monitor = MakeMonitor();
  ASSERT_TRUE(monitor);
  StepSample s = Sample(5);
  ASSERT_TRUE(monitor->OnStep(s).ok());
  std::string text = monitor->PrometheusText();
  EXPECT_EQ(Value(text, "dstrain_steps_total"), 5);
  EXPECT_EQ(Value(text, "dstrain_samples_total"), 80);
  EXPECT_EQ(Value(text, "dstrain_comm_operations_total", {{"op", "reduce"}}), 10);

  s = Sample(7);
  ASSERT_TRUE(monitor->OnStep(s).ok());
  text = monitor->PrometheusText();
  EXPECT_EQ(Value(text, "dstrain_steps_total"), 7);
  EXPECT_EQ(Value(text, "dstrain_tokens_total"), 7 * 16 * 128);
  EXPECT_EQ(Value(text, "dstrain_comm_operations_total", {{"op", "reduce"}}), 14);
  EXPECT_DOUBLE_EQ(*Value(text, "dstrain_comm_seconds_total", {{"op", "allreduce"}}), 0.07);

  // A smaller total (an earlier checkpoint loaded) never lowers a counter;
  // it only moves the baseline the next increments are measured from.
  s = Sample(2);
  ASSERT_TRUE(monitor->OnStep(s).ok());
  text = monitor->PrometheusText();
  EXPECT_EQ(Value(text, "dstrain_steps_total"), 7);
  EXPECT_EQ(Value(text, "dstrain_comm_operations_total", {{"op", "reduce"}}), 14);
  s = Sample(3);
  ASSERT_TRUE(monitor->OnStep(s).ok());
  text = monitor->PrometheusText();
  EXPECT_EQ(Value(text, "dstrain_steps_total"), 8);
  EXPECT_EQ(Value(text, "dstrain_comm_operations_total", {{"op", "reduce"}}), 16);
  EXPECT_EQ(Value(text, "dstrain_loss"), Sample(3).loss) << "gauges follow the last step";

  // A NaN total does not poison the baseline: 0.08 (after step 3) + the
  // step 3 -> 5 difference of 0.02.
  EXPECT_DOUBLE_EQ(*Value(text, "dstrain_comm_seconds_total", {{"op", "allreduce"}}), 0.08);
  s = Sample(4);
  s.comm[0].seconds = std::nan("");
  ASSERT_TRUE(monitor->OnStep(s).ok());
  s = Sample(5);
  ASSERT_TRUE(monitor->OnStep(s).ok());
  text = monitor->PrometheusText();
  EXPECT_DOUBLE_EQ(*Value(text, "dstrain_comm_seconds_total", {{"op", "allreduce"}}), 0.10);
}

TEST(MetricsRegistry, TimersAccumulateAndKeepTheLastStep) {
  auto monitor = MakeMonitor();
  ASSERT_TRUE(monitor);
  StepSample s = Sample(1);
  s.timers = {{"forward", 0.25}, {"step", 0.5}};
  ASSERT_TRUE(monitor->OnStep(s).ok());
  s = Sample(2);
  s.timers = {{"forward", 0.5}, {"backward", 1.0}};
  ASSERT_TRUE(monitor->OnStep(s).ok());
  const std::string text = monitor->PrometheusText();
  EXPECT_EQ(Value(text, "dstrain_timer_seconds_total", {{"timer", "forward"}}), 0.75);
  EXPECT_EQ(Value(text, "dstrain_timer_seconds_total", {{"timer", "step"}}), 0.5);
  EXPECT_EQ(Value(text, "dstrain_timer_seconds_total", {{"timer", "backward"}}), 1.0);
  EXPECT_EQ(Value(text, "dstrain_timer_seconds", {{"timer", "forward"}}), 0.5);
}

TEST(MetricsRegistry, ExpositionIsWellFormedText) {
  auto monitor = MakeMonitor();
  ASSERT_TRUE(monitor);
  for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(monitor->OnStep(Sample(step)).ok());
  const std::string text = monitor->PrometheusText();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  // Every sample line parses (ParseExposition fails the test otherwise), every
  // family has HELP before TYPE before its samples, and no series repeats.
  std::istringstream in(text);
  std::string family;
  std::set<std::string> seen;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0) {
      family = Split(line, ' ')[2];
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      EXPECT_EQ(Split(line, ' ')[2], family) << "TYPE without HELP: " << line;
      continue;
    }
    const std::string key = line.substr(0, line.rfind(' '));
    EXPECT_TRUE(seen.insert(key).second) << "duplicate series " << key;
    EXPECT_EQ(line.rfind(family, 0), 0u) << line << " outside its family " << family;
  }
  EXPECT_EQ(ParseExposition(text).size(), seen.size());
}

TEST(MetricsRegistry, BadJobLabelIsAnErrorNotAnAbort) {
  MonitorOptions options;
  options.identity = Identity();
  options.identity.rank = 9;  // >= world size 8
  auto bad_rank = Monitor::Create(options);
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_NE(bad_rank.status().message().find("rank 9"), std::string::npos);

  options.identity = Identity();
  options.config_json = "{not json";
  auto bad_config = Monitor::Create(options);
  ASSERT_FALSE(bad_config.ok());
  EXPECT_NE(bad_config.status().message().find("/api/v1/config"), std::string::npos);
}

TEST(MetricsHistory, KeepsTheNewestStepsOldestFirst) {
  StepHistory history(3);
  EXPECT_EQ(history.Latest(), nullptr);
  EXPECT_TRUE(history.Last(10).empty());
  for (int64_t step = 1; step <= 5; ++step) history.Push(Sample(step));
  EXPECT_EQ(history.size(), 3u);
  auto all = history.Last(100);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]->step, 3);
  EXPECT_EQ(all[1]->step, 4);
  EXPECT_EQ(all[2]->step, 5);
  auto two = history.Last(2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0]->step, 4);
  EXPECT_EQ(two[1]->step, 5);
  EXPECT_TRUE(history.Last(0).empty());
  EXPECT_EQ(history.Latest()->step, 5);

  StepHistory none(0);
  none.Push(Sample(1));
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(none.Latest()->step, 1);
}

TEST(MetricsHistory, BoundedThroughTheMonitorAndSafeAgainstReaders) {
  MonitorConfig config;
  config.history_steps = 16;
  auto monitor = MakeMonitor(config);
  ASSERT_TRUE(monitor);
  // A reader thread checks every snapshot is a whole, non-decreasing step
  // while the writer pushes (run under TSan/ASan this is the race check).
  std::atomic<bool> done{false};
  std::thread reader([&] {
    int64_t last = 0;
    while (!done.load()) {
      const auto snapshot = monitor->SnapshotJson();
      if (snapshot["sample"].is_null()) continue;
      const int64_t step = snapshot["sample"]["step"];
      EXPECT_GE(step, last);
      EXPECT_EQ(snapshot["sample"]["samples_total"].get<int64_t>(), 16 * step);
      last = step;
      EXPECT_FALSE(monitor->PrometheusText().empty());
    }
  });
  for (int64_t step = 1; step <= 200; ++step) ASSERT_TRUE(monitor->OnStep(Sample(step)).ok());
  done = true;
  reader.join();
  EXPECT_EQ(monitor->SnapshotJson()["sample"]["step"], 200);
}

TEST(MetricsJson, SampleAndIdentityShapes) {
  const nlohmann::json id = IdentityToJson(Identity());
  EXPECT_EQ(id, (nlohmann::json{{"job", "unit_job"},
                                {"rank", 3},
                                {"local_rank", 1},
                                {"world_size", 8},
                                {"dp_rank", 1},
                                {"tp_rank", 1},
                                {"pp_rank", 0}}));
  const StepSample s = Sample(4);
  const nlohmann::json j = SampleToJson(s);
  for (const char *key : {"step", "samples_total", "tokens_total", "loss", "lr", "grad_norm",
                          "loss_scale", "skipped_steps_total", "step_seconds", "tokens_per_second",
                          "samples_per_second", "mfu", "achieved_flops_per_second", "timers",
                          "comm", "memory", "process_rss_bytes", "unix_time"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["step"], 4);
  EXPECT_EQ(j["loss"], s.loss);
  EXPECT_EQ(j["timers"]["backward_reduce_scatter"], 0.03);
  EXPECT_EQ(j["comm"]["reduce_scatter"]["bytes"], s.comm[2].bytes);
  EXPECT_EQ(j["comm"]["barrier"]["bus_bandwidth"], s.comm[5].bus_bandwidth);
  EXPECT_EQ(j["memory"]["offload"]["peak_bytes"], s.memory[5].peak_bytes);
  EXPECT_EQ(j["comm"].size(), kCommOpNames.size());
  EXPECT_EQ(j["memory"].size(), kMemoryCategoryNames.size());
}

MonitorConfig LogConfig(const std::string &dir, const std::string &format) {
  MonitorConfig config;
  config.log.enabled = true;
  config.log.path = dir;
  config.log.format = format;
  return config;
}

TEST(MetricsLog, CsvHasAHeaderAndOneRowPerStep) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/nested/logs";  // created by Open
  {
    auto monitor = MakeMonitor(LogConfig(dir, "csv"));
    ASSERT_TRUE(monitor);
    for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(monitor->OnStep(Sample(step)).ok());
    // Flushed per line: the file is complete while the monitor still lives.
    const auto lines = ReadLines(dir + "/metrics_rank3.csv");
    ASSERT_EQ(lines.size(), 4u);
  }
  const auto lines = ReadLines(dir + "/metrics_rank3.csv");
  ASSERT_EQ(lines.size(), 4u);
  const auto header = Split(lines[0], ',');
  EXPECT_EQ(header, CsvColumns());
  for (const char *column :
       {"step", "loss", "lr", "grad_norm", "timer_forward", "timer_backward_reduce_scatter",
        "comm_allreduce_bytes", "comm_barrier_count", "memory_parameters_bytes",
        "memory_offload_peak_bytes", "process_rss_bytes"}) {
    EXPECT_NE(std::find(header.begin(), header.end(), column), header.end()) << column;
  }
  auto col = [&](const std::string &name) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  for (int64_t step = 1; step <= 3; ++step) {
    const auto row = Split(lines[static_cast<size_t>(step)], ',');
    ASSERT_EQ(row.size(), header.size()) << lines[static_cast<size_t>(step)];
    const StepSample s = Sample(step);
    EXPECT_EQ(row[col("step")], std::to_string(step));
    EXPECT_EQ(std::stod(row[col("loss")]), s.loss) << "round trip";
    EXPECT_EQ(std::stod(row[col("lr")]), s.lr);
    EXPECT_EQ(std::stod(row[col("timer_forward")]), 0.1);
    EXPECT_EQ(row[col("timer_backward_allreduce")], "") << "absent timer = empty cell";
    EXPECT_EQ(row[col("comm_allreduce_bytes")], std::to_string(s.comm[0].bytes));
    EXPECT_EQ(row[col("memory_parameters_bytes")], std::to_string(s.memory[0].current_bytes));
  }

  // A restarted job appends to its log without a second header.
  {
    auto monitor = MakeMonitor(LogConfig(dir, "csv"));
    ASSERT_TRUE(monitor);
    ASSERT_TRUE(monitor->OnStep(Sample(4)).ok());
  }
  const auto appended = ReadLines(dir + "/metrics_rank3.csv");
  ASSERT_EQ(appended.size(), 5u);
  EXPECT_EQ(Split(appended[4], ',')[0], "4");
}

TEST(MetricsLog, CsvWithOtherColumnsIsRefused) {
  TempDir tmp;
  { std::ofstream(tmp.path() + "/metrics_rank3.csv") << "step,loss\n1,2.5\n"; }
  MonitorOptions options;
  options.config = LogConfig(tmp.path(), "csv");
  options.identity = Identity();
  auto monitor = Monitor::Create(options);
  ASSERT_FALSE(monitor.ok());
  EXPECT_NE(monitor.status().message().find(tmp.path() + "/metrics_rank3.csv"), std::string::npos)
      << monitor.status().message();
  EXPECT_NE(monitor.status().message().find("other columns"), std::string::npos);
  EXPECT_EQ(ReadLines(tmp.path() + "/metrics_rank3.csv").size(), 2u) << "left untouched";
}

TEST(MetricsLog, JsonLinesHoldOneSampleObjectPerLine) {
  TempDir tmp;
  auto monitor = MakeMonitor(LogConfig(tmp.path(), "jsonl"));
  ASSERT_TRUE(monitor);
  for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(monitor->OnStep(Sample(step)).ok());
  const auto lines = ReadLines(tmp.path() + "/metrics_rank3.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto j = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(j, SampleToJson(Sample(static_cast<int64_t>(i + 1))));
  }
}

TEST(MetricsLog, UncreatableDirectoryIsAnErrorNamingThePath) {
  TempDir tmp;
  const std::string file = tmp.path() + "/a_file";
  std::ofstream(file) << "x";
  // A directory below a regular file cannot be created, even by root.
  const std::string dir = file + "/logs";
  MonitorOptions options;
  options.config = LogConfig(dir, "csv");
  options.identity = Identity();
  auto monitor = Monitor::Create(options);
  ASSERT_FALSE(monitor.ok());
  EXPECT_EQ(monitor.status().code(), Code::kIo);
  EXPECT_NE(monitor.status().message().find(dir), std::string::npos) << monitor.status().message();
  EXPECT_NE(monitor.status().message().find("dstrain.monitor.log.path"), std::string::npos);
}

TEST(MetricsLog, ReadOnlyDirectoryIsAnErrorNamingThePath) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  TempDir tmp;
  const std::string dir = tmp.path() + "/ro";
  fs::create_directory(dir);
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  MonitorOptions options;
  options.config = LogConfig(dir, "csv");
  options.identity = Identity();
  auto monitor = Monitor::Create(options);
  fs::permissions(dir, fs::perms::owner_all);
  ASSERT_FALSE(monitor.ok());
  EXPECT_NE(monitor.status().message().find(dir + "/metrics_rank3.csv"), std::string::npos)
      << monitor.status().message();
}

TEST(MetricsLog, FullDiskIsAnErrorNamingTheFile) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  TempDir tmp;
  // The rank's file is /dev/full: every write fails with ENOSPC.
  fs::create_symlink("/dev/full", tmp.path() + "/metrics_rank0.jsonl");
  fs::create_symlink("/dev/full", tmp.path() + "/metrics_rank0.csv");

  MonitorLogConfig jsonl = LogConfig(tmp.path(), "jsonl").log;
  auto log = MetricsLog::Open(jsonl, 0);
  ASSERT_TRUE(log.ok()) << log.status().message();
  const Status written = log.value()->Append(Sample(1));
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.code(), Code::kIo);
  EXPECT_NE(written.message().find(tmp.path() + "/metrics_rank0.jsonl"), std::string::npos)
      << written.message();
  EXPECT_NE(written.message().find("No space left"), std::string::npos) << written.message();

  // The CSV header is written at open, so the error comes from Open.
  auto csv = MetricsLog::Open(LogConfig(tmp.path(), "csv").log, 0);
  ASSERT_FALSE(csv.ok());
  EXPECT_NE(csv.status().message().find(tmp.path() + "/metrics_rank0.csv"), std::string::npos)
      << csv.status().message();
}

TEST(MetricsLog, OnStepReportsALogWriteFailure) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  TempDir tmp;
  fs::create_symlink("/dev/full", tmp.path() + "/metrics_rank3.jsonl");
  auto monitor = MakeMonitor(LogConfig(tmp.path(), "jsonl"));
  ASSERT_TRUE(monitor);
  const Status status = monitor->OnStep(Sample(1));
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("metrics_rank3.jsonl"), std::string::npos) << status.message();
  // The registry and history still have the step.
  EXPECT_EQ(monitor->SnapshotJson()["sample"]["step"], 1);
  EXPECT_EQ(Value(monitor->PrometheusText(), "dstrain_steps_total"), 1);
}

// promtool (Debian package prometheus) lints the exposition: names, units,
// help strings, counter suffixes. Any output is a problem to fix in our names.
TEST(MetricsPromtool, ExpositionPassesPromtoolCheckMetrics) {
  const char *promtool = "/usr/bin/promtool";
  if (access(promtool, X_OK) != 0) GTEST_SKIP() << promtool << " is not installed";
  auto monitor = MakeMonitor();
  ASSERT_TRUE(monitor);
  for (int64_t step = 1; step <= 3; ++step) ASSERT_TRUE(monitor->OnStep(Sample(step)).ok());
  TempDir tmp;
  const std::string path = tmp.path() + "/metrics.txt";
  std::ofstream(path) << monitor->PrometheusText();

  const std::string command = std::string(promtool) + " check metrics < " + path + " 2>&1";
  FILE *pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) output.append(buf, n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_EQ(output, "") << "promtool reports problems:\n" << output;
}

}  // namespace
}  // namespace dst::metrics
