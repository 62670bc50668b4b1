#include "launch_command.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>

#include "autotune_command.h"
#include "cli_error.h"
#include "launch_process.h"

extern char **environ;  // POSIX: the launcher's environment, passed on to the ranks

namespace dstrain_cli {
namespace {

constexpr const char *kTokenVar = "DSTRAIN_JOB_TOKEN";
constexpr size_t kTokenBytes = 16;  // 128 random bits, as 32 hex digits

constexpr const char *kFooter =
    R"(Environment of every rank (torchrun's contract; mpirun's OMPI_* and srun's
SLURM_* variables are read by dstrain too, so `dstrain train` runs under either):
  RANK               global rank = node_rank * nproc_per_node + local rank
  WORLD_SIZE         nnodes * nproc_per_node
  LOCAL_RANK         rank on this node, 0 .. nproc_per_node-1
  LOCAL_WORLD_SIZE   nproc_per_node
  NODE_RANK          --node-rank
  MASTER_ADDR        --master-addr: the host of rank 0, which hosts the rendezvous store
  MASTER_PORT        --master-port: the store's TCP port
  DSTRAIN_JOB_TOKEN  the job's token, inherited when set, else random; the store
                     only admits processes that present it
Several nodes: run one launcher per node with the same --nnodes, --nproc-per-node,
--master-addr (a reachable address of node 0) and --master-port, its own --node-rank,
and the same DSTRAIN_JOB_TOKEN exported on every node, e.g.
  export DSTRAIN_JOB_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
Failures: when a rank exits non-zero or is killed, the launcher prints
"rank R (pid P) failed first: ...", sends SIGTERM to the other ranks (SIGKILL after
--kill-timeout seconds) and exits with that rank's status (128+N for signal N).
SIGTERM and SIGHUP are forwarded to the ranks (SIGKILL after --kill-timeout);
Ctrl-C reaches the ranks directly; a third Ctrl-C kills them. The ranks' output is
not prefixed: they write to the launcher's stdout and stderr.
Example:
  dstrain launch --nproc-per-node 4 -- dstrain train --config ds_config.json)";

// The job token: inherited, so that every node's launcher (and any outer
// tool) agrees on it, else fresh random bytes for a single-node job.
std::optional<std::string> InheritedToken() {
  const char *token = std::getenv(kTokenVar);
  if (token == nullptr || *token == '\0') return std::nullopt;
  return std::string(token);
}

std::string RandomToken() {
  unsigned char bytes[kTokenBytes];
  FILE *random = std::fopen("/dev/urandom", "rb");
  const size_t got = random == nullptr ? 0 : std::fread(bytes, 1, sizeof(bytes), random);
  if (random != nullptr) std::fclose(random);
  if (got != sizeof(bytes)) {
    throw CliError(kExitFailure,
                   "cannot read /dev/urandom to make a job token; export DSTRAIN_JOB_TOKEN "
                   "yourself");
  }
  std::string token;
  for (unsigned char byte : bytes) {
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", byte);
    token += hex;
  }
  return token;
}

std::string ResolveToken(const LaunchOptions &options) {
  if (auto token = InheritedToken()) return *token;
  if (options.nnodes > 1) {
    UsageError("--nnodes " + std::to_string(options.nnodes) +
               ": the launchers of all nodes must give their ranks the same job token, and "
               "DSTRAIN_JOB_TOKEN is not set. Export the same value on every node before "
               "`dstrain launch`, e.g.\n  export DSTRAIN_JOB_TOKEN=$(od -An -N16 -tx1 "
               "/dev/urandom | tr -d ' \\n')   # on one node, then copy it to the others");
  }
  return RandomToken();
}

void Validate(const LaunchOptions &options) {
  if (options.node_rank >= options.nnodes) {
    UsageError("--node-rank " + std::to_string(options.node_rank) + " must be less than --nnodes " +
               std::to_string(options.nnodes));
  }
  if (options.program.empty()) {
    UsageError("no program to launch: dstrain launch [OPTIONS] -- PROGRAM [ARGS...]");
  }
}

// The variables this rank gets on top of the launcher's environment.
std::map<std::string, std::string> RankVariables(const LaunchOptions &options,
                                                 const std::string &token, int64_t local_rank) {
  return {
      {"RANK", std::to_string(options.node_rank * options.nproc_per_node + local_rank)},
      {"WORLD_SIZE", std::to_string(options.nnodes * options.nproc_per_node)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
      {"NODE_RANK", std::to_string(options.node_rank)},
      {"MASTER_ADDR", options.master_addr},
      {"MASTER_PORT", std::to_string(options.master_port)},
      {kTokenVar, token},
  };
}

// The launcher's environment with `overrides` replacing or adding entries.
std::vector<std::string> ChildEnvironment(const std::map<std::string, std::string> &overrides) {
  std::vector<std::string> env;
  for (char **entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const std::string name = text.substr(0, text.find('='));
    if (overrides.count(name) == 0) env.push_back(text);
  }
  for (const auto &[name, value] : overrides) env.push_back(name + "=" + value);
  return env;
}

// The shell's convention: 127 when the program is not found, 126 when it is
// there but cannot be run.
int ExitCodeForExecError(int error) {
  return error == ENOENT ? 127 : 126;
}

}  // namespace

LaunchCommand::LaunchCommand(CLI::App &parent) {
  app_ = parent.add_subcommand(
      "launch",
      "Start this node's ranks of a multi-process job (torchrun's environment contract) and "
      "supervise them:\n  dstrain launch [OPTIONS] -- PROGRAM [ARGS...]");
  app_->footer(kFooter);
  app_->add_option("--nproc-per-node,--nproc_per_node", options_.nproc_per_node,
                   "ranks to start on this node")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16))
      ->capture_default_str();
  app_->add_option("--nnodes", options_.nnodes, "number of nodes, one launcher each")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app_->add_option("--node-rank,--node_rank", options_.node_rank, "this node's index, 0..nnodes-1")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  app_->add_option("--master-addr,--master_addr", options_.master_addr,
                   "address of node 0 (where rank 0 hosts the rendezvous store)")
      ->capture_default_str();
  app_->add_option("--master-port,--master_port", options_.master_port,
                   "TCP port of the rendezvous store")
      ->check(CLI::Range(int64_t{1}, int64_t{65535}))
      ->capture_default_str();
  app_->add_option("--kill-timeout", options_.kill_timeout,
                   "seconds the ranks get to exit after SIGTERM before SIGKILL")
      ->check(CLI::Range(int64_t{0}, int64_t{24} * 3600))
      ->capture_default_str();
  app_->add_option("--autotuning", options_.autotuning,
                   "DeepSpeed's launcher flag: tune the program's ds_config (its autotuning "
                   "section; see `dstrain autotune`), then stop (tune) or launch the program "
                   "with the best one (run)")
      ->check(CLI::IsMember({"tune", "run"}));
}

int LaunchCommand::ProgramStart(int argc, char **argv) const {
  for (int i = 2; i < argc; ++i) {  // argv[1] is "launch"
    const std::string token = argv[i];
    if (token == "--") return i + 1;
    if (token.size() < 2 || token[0] != '-') return i;   // PROGRAM
    if (token.find('=') != std::string::npos) continue;  // --option=value
    const CLI::Option *option = app_->get_option_no_throw(token);
    if (option != nullptr && option->get_items_expected_min() > 0) ++i;  // its value
  }
  return argc;
}

void LaunchCommand::SetProgram(std::vector<std::string> program) {
  options_.program = std::move(program);
}

// --autotuning: the program's own ds_config is tuned with trials of this
// node's ranks; "run" then launches the program with the best one.
int LaunchCommand::Tune() {
  if (options_.nnodes > 1)
    throw CliError(kExitUsage,
                   "--autotuning with --nnodes " + std::to_string(options_.nnodes) +
                       ": a launcher starts one node's ranks; tune across nodes from the first "
                       "one with `dstrain autotune --hostfile FILE --config ds.json -- PROGRAM "
                       "ARGS` (each trial spans every host), then launch the nodes with "
                       "results_dir/cmd_optimal.txt");
  AutotuneOptions tune;
  tune.config_path = ConfigArgument(options_.program);
  if (tune.config_path.empty())
    UsageError(
        "--autotuning: the program's arguments name no ds_config; pass it as "
        "--deepspeed_config FILE or --config FILE");
  tune.world_size = options_.nproc_per_node;
  tune.master_port = options_.master_port;
  tune.program = options_.program;
  const AutotuneResult best = Autotune(tune);
  if (options_.autotuning == "tune") return kExitOk;
  std::printf("\nlaunching with %s\n", best.config_path.c_str());
  std::fflush(stdout);
  options_.program = best.program;
  options_.autotuning.clear();
  return Run();
}

int LaunchCommand::Run() {
  Validate(options_);
  if (!options_.autotuning.empty()) return Tune();
  const std::string token = ResolveToken(options_);
  RankSupervisor supervisor{std::chrono::seconds(options_.kill_timeout)};
  for (int64_t local_rank = 0; local_rank < options_.nproc_per_node; ++local_rank) {
    RankSpec spec;
    spec.rank = options_.node_rank * options_.nproc_per_node + local_rank;
    spec.argv = options_.program;
    spec.env = ChildEnvironment(RankVariables(options_, token, local_rank));
    if (auto failure = supervisor.Spawn(spec)) {
      std::fprintf(stderr, "dstrain launch: rank %lld: %s\n", static_cast<long long>(spec.rank),
                   failure->message.c_str());
      supervisor.StopAll();
      return ExitCodeForExecError(failure->error);
    }
  }
  return supervisor.WaitAll();
}

}  // namespace dstrain_cli
