#include "autotune_command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "autotuner.h"
#include "cli_error.h"
#include "default_job.h"
#include "dstrain/dstrain.h"
#include "format.h"
#include "trial_nodes.h"

namespace dstrain_cli {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string SelfPath() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw CliError(kExitFailure, "cannot find the dstrain executable: " + ec.message());
  return self.string();
}

// The machine's available memory (bytes), 0 when unknown.
int64_t AvailableMemory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

Json ReadConfig(const std::string &path) {
  const char *text = nullptr;
  Check(dst_config_file_read(path.c_str(), &text), "reading the config");
  try {
    return Json::parse(text);
  } catch (const Json::exception &e) {
    throw CliError(kExitUsage, "config " + path + ": not valid JSON: " + e.what());
  }
}

// `dstrain estimate` of one trial config at `world` ranks.
Estimate EstimateTrial(const Json &config, const AutotuneOptions &o) {
  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  const std::string text = config.dump();
  opts.config_json = text.c_str();
  if (o.model_path.empty())
    opts.model_json = DefaultModelJson();
  else
    opts.model_path = o.model_path.c_str();
  opts.total_steps = 1000000;  // only resolves "auto" schedule lengths
  const char *json = nullptr;
  Estimate e;
  if (dst_estimate_memory_json(&opts, o.world_size, &json) != DST_OK) {
    e.error = dst_last_error();
    return e;
  }
  const Json out = Json::parse(json);
  e.bytes = out["per_rank"]["total_bytes"].get<int64_t>();
  e.dp = out["dp_size"].get<int64_t>();
  e.parameters_per_rank = out["parameters_per_rank"].get<int64_t>();
  return e;
}

// The program's last non-empty line of a trial's stderr (a failed trial's
// reason), the launcher's own report aside.
std::string LastLine(const fs::path &path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos &&
        line.rfind("dstrain launch:", 0) != 0)
      last = line;
  return last;
}

void WriteFile(const fs::path &path, const std::string &text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out.good())
    throw CliError(kExitFailure, "cannot write " + path.string() +
                                     " (a full disk or no permission); choose another "
                                     "autotuning.results_dir / exps_dir");
}

// Signals that end the tuning (the running trial is stopped first): blocked
// while tuning and polled, so a trial is never left running.
class TuningSignals {
 public:
  TuningSignals() {
    sigemptyset(&set_);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set_, s);
    sigprocmask(SIG_BLOCK, &set_, &original_);
  }
  ~TuningSignals() { sigprocmask(SIG_SETMASK, &original_, nullptr); }
  // Waits up to `ms` for one; returns it, or 0.
  int Poll(int ms) {
    timespec t{ms / 1000, (ms % 1000) * 1000000L};
    const int s = sigtimedwait(&set_, nullptr, &t);
    return s > 0 ? s : 0;
  }
  const sigset_t &original() const { return original_; }

 private:
  sigset_t set_, original_;
};

// One trial as a process group of its own: `dstrain launch` of the program.
struct TrialRun {
  bool measured = false;
  std::string failure;
  Json metric;
  int signal = 0;  // a signal that ended the tuning during the trial
};

void StopGroup(pid_t pid) {
  killpg(pid, SIGTERM);
  for (int i = 0; i < 100; ++i) {  // the launcher stops its ranks, then exits
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    usleep(100 * 1000);
  }
  killpg(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

std::optional<Json> ReadMetric(const fs::path &path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    Json metric = Json::parse(in);
    if (metric.contains("throughput") && metric.contains("latency")) return metric;
  } catch (const Json::exception &) {
  }
  return std::nullopt;
}

// Starts one node's launcher as a process group of its own, its output to
// the trial's logs (stdout.log / stderr.log for node 0, .nodeN.log for others).
pid_t StartNode(const std::vector<std::string> &argv, const fs::path &dir, size_t node,
                TuningSignals &signals) {
  const std::string suffix = node == 0 ? ".log" : ".node" + std::to_string(node) + ".log";
  const pid_t pid = fork();
  if (pid != 0) {
    if (pid > 0) setpgid(pid, pid);
    return pid;
  }
  setpgid(0, 0);
  sigprocmask(SIG_SETMASK, &signals.original(), nullptr);
  const int out = open((dir / ("stdout" + suffix)).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = open((dir / ("stderr" + suffix)).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out >= 0) dup2(out, STDOUT_FILENO);
  if (err >= 0) dup2(err, STDERR_FILENO);
  std::vector<char *> args;
  for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "cannot execute %s: %s\n", args[0], std::strerror(errno));
  _exit(127);
}

// Runs a trial's launchers (node 0's first) until rank 0's metric appears,
// node 0's launcher exits, the timeout passes or a signal ends the tuning;
// then stops every launcher still running.
TrialRun RunTrial(const std::vector<NodeCommand> &nodes, const fs::path &dir,
                  const fs::path &metric_path, int64_t timeout, TuningSignals &signals) {
  TrialRun run;
  std::vector<pid_t> pids;
  auto stop_all = [&] {
    for (pid_t pid : pids)
      if (pid > 0) StopGroup(pid);
  };
  for (size_t node = 0; node < nodes.size(); ++node) {
    const pid_t pid = StartNode(nodes[node].argv, dir, node, signals);
    if (pid < 0) {
      run.failure = "cannot start the trial on " + nodes[node].host + ": " + std::strerror(errno);
      stop_all();
      return run;
    }
    pids.push_back(pid);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(timeout);
  for (;;) {
    if (auto metric = ReadMetric(metric_path)) {
      run.measured = true;
      run.metric = *metric;
      stop_all();  // the profiled steps are done: the rest of the run is not needed
      return run;
    }
    // Another host's launcher that fails (an unreachable host, a missing
    // executable) fails the trial at once: node 0's ranks would wait for its
    // ranks until the timeout.
    for (size_t node = 1; node < pids.size(); ++node) {
      int status = 0;
      if (pids[node] <= 0 || waitpid(pids[node], &status, WNOHANG) != pids[node]) continue;
      pids[node] = 0;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      const std::string last = LastLine(dir / ("stderr.node" + std::to_string(node) + ".log"));
      run.failure =
          "the launcher on " + nodes[node].host + " " +
          (WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                             : "was killed by signal " + std::to_string(WTERMSIG(status))) +
          (last.empty() ? "" : ": " + last);
      stop_all();
      return run;
    }
    int status = 0;
    if (waitpid(pids[0], &status, WNOHANG) == pids[0]) {
      pids[0] = 0;
      if (auto metric = ReadMetric(metric_path)) {
        run.measured = true;
        run.metric = *metric;
        stop_all();
        return run;
      }
      const std::string last = LastLine(dir / "stderr.log");
      run.failure = (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                       : "killed by signal " + std::to_string(WTERMSIG(status))) +
                    (last.empty() ? "" : ": " + last);
      if (nodes.size() > 1) run.failure += " (other nodes: stderr.node*.log)";
      stop_all();
      return run;
    }
    if (Clock::now() > deadline) {
      stop_all();
      run.failure = "no metric after " + std::to_string(timeout) +
                    " s (stopped; raise --trial-timeout for slower trials)";
      return run;
    }
    if (const int s = signals.Poll(200)) {
      stop_all();
      run.signal = s;
      run.failure = "interrupted";
      return run;
    }
  }
}

// The mapped keys' values in a trial config ("train_micro_batch_size_per_gpu"
// -> "--per_device_train_batch_size" 4).
std::vector<std::pair<std::string, std::string>> MappedValues(const TuningSettings &s,
                                                              const Json &config) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto &[key, argument] : s.arg_mappings) {
    if (!config.contains(key)) continue;
    const Json &v = config[key];
    out.push_back({argument, v.is_string() ? v.get<std::string>() : v.dump()});
  }
  return out;
}

// The command a trial (or the final run) executes, with `config` as its ds_config.
std::vector<std::string> ProgramFor(const AutotuneOptions &o, const TuningSettings &s,
                                    const std::string &self, const std::string &config_path,
                                    const Json &config, int64_t steps) {
  if (!o.program.empty())
    return WithTrialArguments(o.program, config_path, MappedValues(s, config));
  std::vector<std::string> argv = {self, "train", "--config", config_path};
  if (!o.model_path.empty()) argv.insert(argv.end(), {"--model", o.model_path});
  if (!o.data_path.empty()) argv.insert(argv.end(), {"--data", o.data_path});
  if (steps > 0)
    argv.insert(argv.end(), {"--steps", std::to_string(steps), "--eval-interval", "1000000000",
                             "--eval-batches", "1", "--quiet"});
  return argv;
}

// Runs the tuner's choices among trials[first..] one after another, each a
// `dstrain launch` of the program with the trial's ds_config.
struct TrialRunner {
  const AutotuneOptions &o;
  const TuningSettings &settings;
  const Json &base;
  const std::string &self;
  const fs::path &exps;
  const TrialNodes &nodes;
  const std::string &token;
  TuningSignals &signals;
  int64_t number = 0;   // trials started, over both phases
  int interrupted = 0;  // the signal that ended the tuning

  void Run(std::vector<Trial> *trials, size_t first, std::optional<double> to_beat) {
    Tuner tuner(settings, trials, first, to_beat);
    for (int next = tuner.Next(); next >= 0 && !interrupted; next = tuner.Next())
      RunOne(trials, next);
  }

  void RunOne(std::vector<Trial> *trials, int next) {
    Trial &t = (*trials)[size_t(next)];
    ++number;
    std::error_code ec;
    const fs::path dir = exps / t.point.Name();
    fs::create_directories(dir, ec);
    const fs::path metric_path = dir / "metric.json";
    t.ran = true;
    std::optional<Json> earlier = settings.overwrite ? std::nullopt : ReadMetric(metric_path);
    std::printf("trial %lld: %s ...", static_cast<long long>(number), t.point.Name().c_str());
    std::fflush(stdout);
    Json metric;
    if (earlier) {
      metric = *earlier;
      t.reused = true;
    } else {
      fs::remove(metric_path, ec);
      Json config = TrialConfig(base, t.point, t.dp);
      config["autotuning"]["enabled"] = true;
      config["autotuning"]["metric_path"] = metric_path.string();
      const fs::path config_path = dir / "ds_config.json";
      WriteFile(config_path, config.dump(2) + "\n");
      const std::vector<std::string> program = ProgramFor(o, settings, self, config_path.string(),
                                                          config, settings.end_profile_step + 1);
      const std::vector<NodeCommand> commands =
          TrialCommands(nodes, self, o.master_port + number % 1000, token, program);
      WriteFile(dir / "cmd.txt", CommandLines(nodes, self, o.master_port + number % 1000, program));
      const TrialRun run = RunTrial(commands, dir, metric_path, o.trial_timeout, signals);
      interrupted = run.signal;
      if (!run.measured) {
        t.failure = run.failure;
        std::printf(" failed: %s (logs in %s)\n", run.failure.c_str(), dir.c_str());
        return;
      }
      metric = run.metric;
    }
    t.throughput = metric.value("throughput", 0.0);
    t.latency_ms = metric.value("latency", 0.0);
    t.flops = metric.value("FLOPS_per_gpu", 0.0);
    const int best = BestTrial(*trials, settings.metric);
    std::printf(" %.2f samples/s, %.2f ms/step%s%s\n", t.throughput, t.latency_ms,
                best == next ? "  (best so far)" : "", t.reused ? "  (earlier result)" : "");
    std::fflush(stdout);
  }
};

}  // namespace

std::string ConfigArgument(const std::vector<std::string> &program) {
  for (size_t i = 0; i < program.size(); ++i) {
    const std::string &a = program[i];
    for (const char *flag : {"--deepspeed_config", "--deepspeed-config", "--config"}) {
      const std::string f = flag;
      if (a == f && i + 1 < program.size()) return program[i + 1];
      if (a.rfind(f + "=", 0) == 0) return a.substr(f.size() + 1);
    }
  }
  return "";
}

std::vector<std::string> WithTrialArguments(
    std::vector<std::string> program, const std::string &config,
    const std::vector<std::pair<std::string, std::string>> &mapped_values) {
  for (size_t i = 0; i < program.size(); ++i) {
    std::string &a = program[i];
    if (a == "{config}") a = config;
    for (const char *flag : {"--deepspeed_config", "--deepspeed-config", "--config"}) {
      const std::string f = flag;
      if (a == f && i + 1 < program.size()) program[i + 1] = config;
      if (a.rfind(f + "=", 0) == 0) a = f + "=" + config;
    }
  }
  for (const auto &[argument, value] : mapped_values) {
    bool found = false;
    for (size_t i = 0; i < program.size(); ++i) {
      if (program[i] == argument && i + 1 < program.size()) {
        program[i + 1] = value;
        found = true;
      } else if (program[i].rfind(argument + "=", 0) == 0) {
        program[i] = argument + "=" + value;
        found = true;
      }
    }
    if (!found) program.insert(program.end(), {argument, value});
  }
  return program;
}

namespace {

// The trial nodes: the hostfile's, or this one with --world-size ranks.
TrialNodes NodesOf(const AutotuneOptions &o) {
  TrialNodes nodes;
  if (o.hostfile.empty()) {
    nodes.hosts = {"localhost"};
    nodes.slots = std::max<int64_t>(1, o.world_size);
    nodes.master_addr = "127.0.0.1";
  } else {
    nodes = ReadHostfile(o.hostfile);
    if (o.world_size > 0 && o.world_size != nodes.world())
      UsageError("--world-size " + std::to_string(o.world_size) + " but the hostfile lists " +
                 std::to_string(nodes.world()) + " ranks (" + std::to_string(nodes.hosts.size()) +
                 " hosts x " + std::to_string(nodes.slots) + " slots); drop --world-size");
  }
  if (!o.master_addr.empty()) nodes.master_addr = o.master_addr;
  if (!o.remote.empty()) nodes.remote = o.remote;
  return nodes;
}

// The job token every node's launcher presents to the rendezvous store.
std::string JobToken() {
  if (const char *t = std::getenv("DSTRAIN_JOB_TOKEN"); t && *t) return t;
  std::ifstream random("/dev/urandom", std::ios::binary);
  unsigned char bytes[16] = {};
  random.read(reinterpret_cast<char *>(bytes), sizeof bytes);
  std::string token;
  char hex[3];
  for (unsigned char b : bytes) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    token += hex;
  }
  return token;
}

}  // namespace

AutotuneResult Autotune(const AutotuneOptions &given) {
  const TrialNodes nodes = NodesOf(given);
  AutotuneOptions o = given;
  o.world_size = nodes.world();
  const std::string token = JobToken();
  setenv("DSTRAIN_JOB_TOKEN", token.c_str(), 1);  // node 0's launcher inherits it
  const Json base = ReadConfig(o.config_path);
  const TuningSettings settings = ReadTuningSettings(base);
  // The config as written, checked by the library once: a mistyped key is
  // named now rather than in every trial.
  {
    Json check = WithoutKnobLists(base);
    if (check.contains("zero_optimization") && check["zero_optimization"].is_object() &&
        check["zero_optimization"].contains("stage") &&
        !check["zero_optimization"]["stage"].is_number_integer())
      check["zero_optimization"]["stage"] = 0;
    if (!check.value("train_micro_batch_size_per_gpu", Json(1)).is_number_integer() ||
        (!check.contains("train_micro_batch_size_per_gpu") &&
         !check.value("train_batch_size", Json()).is_number_integer()))
      check["train_micro_batch_size_per_gpu"] = settings.min_micro_batch;  // the tuner sets it
    if (check.contains("train_batch_size") && !check["train_batch_size"].is_number_integer())
      check.erase("train_batch_size");
    const Estimate e = EstimateTrial(check, o);
    if (!e.error.empty()) throw CliError(kExitUsage, "config " + o.config_path + ": " + e.error);
  }
  int64_t budget = 0;
  if (!o.memory_per_rank.empty()) {
    budget = ParseBytes(o.memory_per_rank, "--memory-per-rank");
  } else {
    budget = AvailableMemory() / nodes.slots;
    if (budget <= 0) UsageError("cannot read the available memory: give --memory-per-rank");
  }
  std::printf(
      "autotuning %s: metric %s, tuner %s, %s, %lld rank%s%s, budget %.1f MiB per rank\n",
      o.config_path.c_str(), settings.metric.c_str(), settings.tuner_type.c_str(),
      settings.fast ? "fast (ZeRO stage x micro-batch)"
                    : "full (ZeRO stage x micro-batch x dp/tp/pp x recomputation, then ZeRO knobs)",
      static_cast<long long>(o.world_size), o.world_size == 1 ? "" : "s",
      nodes.hosts.size() > 1 ? (" on " + std::to_string(nodes.hosts.size()) + " hosts").c_str()
                             : "",
      double(budget) / (1024.0 * 1024.0));
  std::fflush(stdout);

  std::vector<Trial> trials = BuildSpace(base, settings, o.world_size, budget,
                                         [&](const Json &c) { return EstimateTrial(c, o); });
  int64_t candidates = 0;
  for (const Trial &t : trials) candidates += t.pruned.empty() ? 1 : 0;
  std::printf("space: %zu points, %lld to try, %lld pruned by memory or refused\n", trials.size(),
              static_cast<long long>(candidates),
              static_cast<long long>(int64_t(trials.size()) - candidates));

  const fs::path exps = fs::absolute(settings.exps_dir);
  const fs::path results = fs::absolute(settings.results_dir);
  std::error_code ec;
  fs::create_directories(exps, ec);
  fs::create_directories(results, ec);
  if (!fs::is_directory(exps) || !fs::is_directory(results))
    throw CliError(kExitFailure, "cannot create " + exps.string() + " or " + results.string() +
                                     ": choose writable autotuning.exps_dir / results_dir");

  const std::string self = SelfPath();
  TuningSignals signals;
  TrialRunner runner{o, settings, base, self, exps, nodes, token, signals};
  runner.Run(&trials, 0, std::nullopt);

  // The second phase: the ZeRO knobs at the best point of the first.
  if (const int first_best = BestTrial(trials, settings.metric);
      first_best >= 0 && !runner.interrupted) {
    const Trial best = trials[size_t(first_best)];
    std::vector<std::string> notes;
    const std::vector<Knob> knobs = KnobSpace(
        base, settings, best,
        EstimateTrial(TrialConfig(base, best.point, best.dp), o).parameters_per_rank, &notes);
    for (const std::string &note : notes) std::printf("ZeRO knobs: %s\n", note.c_str());
    if (!knobs.empty()) {
      const size_t first = trials.size();
      for (Trial &t : BuildKnobSpace(base, best, knobs, budget,
                                     [&](const Json &c) { return EstimateTrial(c, o); }))
        trials.push_back(std::move(t));
      std::string names;
      for (const Knob &k : knobs)
        names +=
            (names.empty() ? "" : " x ") + k.key + " (" + std::to_string(k.values.size()) + ")";
      std::printf("ZeRO knobs at %s: %s = %zu points\n", best.point.Name().c_str(), names.c_str(),
                  trials.size() - first);
      std::fflush(stdout);
      runner.Run(&trials, first, best.Score(settings.metric));
    }
  }
  const int interrupted = runner.interrupted;

  const std::string table = ResultsTable(trials, settings.metric);
  WriteFile(results / "summary.txt", table);
  WriteFile(results / "results.json", ResultsJson(trials, settings.metric).dump(2) + "\n");
  std::printf("\n%s", table.c_str());
  if (interrupted)
    throw CliError(128 + interrupted, "autotuning interrupted; the trials so far are in " +
                                          (results / "summary.txt").string());
  const int best = BestTrial(trials, settings.metric);
  if (best < 0)
    throw CliError(kExitFailure,
                   "no trial was measured (each one's logs are in " + exps.string() +
                       "); fix the failure they show, or widen the space (micro-batch bounds, "
                       "--memory-per-rank)");
  const Trial &winner = trials[size_t(best)];
  Json optimal = TrialConfig(base, winner.point, winner.dp);
  if (optimal.contains("autotuning")) optimal["autotuning"].erase("metric_path");
  const fs::path optimal_path = results / "ds_config_optimal.json";
  WriteFile(optimal_path, optimal.dump(2) + "\n");
  const std::vector<std::string> program =
      ProgramFor(o, settings, self, optimal_path.string(), optimal, 0);
  const std::string run = CommandLines(nodes, self, o.master_port, program);  // a line a node
  WriteFile(results / "cmd_optimal.txt", run);
  const std::string how = nodes.hosts.size() > 1 ? "run it (a launcher a node):\n" : "run it: ";
  std::printf("\nbest: %s (%s %.4g); its ds_config: %s\n%s%s", winner.point.Name().c_str(),
              settings.metric.c_str(),
              settings.metric == "latency" ? winner.latency_ms
              : settings.metric == "flops" ? winner.flops
                                           : winner.throughput,
              optimal_path.c_str(), how.c_str(), run.c_str());
  return {optimal_path.string(), program};
}

AutotuneCommand::AutotuneCommand(CLI::App &parent) {
  app_ = parent.add_subcommand(
      "autotune",
      "DeepSpeed's autotuner: short real trials over ZeRO stage x micro-batch (and layouts), "
      "pruned by exact memory; the best ds_config goes to autotuning.results_dir. "
      "[-- PROGRAM ARGS]: tune your own program (its --deepspeed_config / --config is replaced)");
  app_->add_option("--config", options_.config_path, "ds_config.json with an autotuning section")
      ->required()
      ->type_name("FILE");
  app_->add_option("--model", options_.model_path,
                   "model spec JSON or Hugging Face directory (default: the built-in GPT)");
  app_->add_option("--data", options_.data_path, "text file the trials train on");
  app_->add_option("--world-size", options_.world_size, "ranks per trial on this node (1)")
      ->check(CLI::PositiveNumber);
  app_->add_option("--hostfile", options_.hostfile,
                   "DeepSpeed hostfile (\"HOST slots=N\" lines): trials span every host, "
                   "started from here (the first host) through --remote; the dstrain "
                   "executable, config and exps_dir at the same paths on every host");
  app_->add_option("--master-addr", options_.master_addr,
                   "the first host's address as the others reach it (default: its hostfile name)");
  app_->add_option("--remote", options_.remote,
                   "command prefix that runs a launcher on another host, {host} replaced "
                   "(default: \"ssh -o BatchMode=yes {host}\")");
  app_->add_option("--memory-per-rank", options_.memory_per_rank,
                   "budget a trial must fit in (e.g. 16GiB; default: available memory / ranks)");
  app_->add_option("--trial-timeout", options_.trial_timeout,
                   "seconds a trial may run before its metric appears (600)")
      ->check(CLI::PositiveNumber);
  app_->add_option("--master-port", options_.master_port, "first trial's rendezvous port (29600)");
}

int AutotuneCommand::Run() {
  Autotune(options_);
  return kExitOk;
}

}  // namespace dstrain_cli
