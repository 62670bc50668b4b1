#include "core/comm/launch_env.h"

#include <charconv>
#include <new>
#include <string_view>
#include <system_error>
#include <vector>

extern char **environ;  // POSIX: the process environment

namespace dst {
namespace {

using Env = std::map<std::string, std::string>;

constexpr int kDefaultPort = 29500;

// The variable's value, or nullptr when it is unset or empty (`export RANK=`
// is how shells clear a variable, so empty means "not given").
const std::string *Find(const Env &env, const char *name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

bool Has(const Env &env, const char *name) {
  return Find(env, name) != nullptr;
}

std::string Show(const char *name, const std::string &value) {
  return std::string(name) + "='" + value + "'";
}

Status NotAnInteger(const char *name, const std::string &value) {
  return InvalidArgument("launch environment: " + Show(name, value) + " is not an integer");
}

Status ParseInt(const std::string &text, const char *name, int64_t *out) {
  const char *end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, *out);
  if (error != std::errc() || stop != end) return NotAnInteger(name, text);
  return Status::Ok();
}

// A variable that must be set and hold an integer.
Status RequireInt(const Env &env, const char *name, const char *because, int64_t *out) {
  const std::string *value = Find(env, name);
  if (value == nullptr) {
    return InvalidArgument("launch environment: " + std::string(name) + " is not set, but " +
                           because);
  }
  return ParseInt(*value, name, out);
}

// A variable that may be missing (then `fallback`) but must be an integer.
Status OptionalInt(const Env &env, const char *name, int64_t fallback, int64_t *out) {
  const std::string *value = Find(env, name);
  if (value == nullptr) {
    *out = fallback;
    return Status::Ok();
  }
  return ParseInt(*value, name, out);
}

// Which variables a launcher uses, so validation errors name the ones the
// user actually sees.
struct VarNames {
  const char *rank;
  const char *world_size;
  const char *local_rank;
  const char *local_world_size;
  const char *node_rank;
};

std::string Var(const char *name, int64_t value) {
  return std::string(name) + "=" + std::to_string(value);
}

Status ValidateRanks(const LaunchEnv &e, const VarNames &n) {
  const std::string where = "launch environment: ";
  if (e.world_size < 1) {
    return InvalidArgument(where + Var(n.world_size, e.world_size) + " must be at least 1");
  }
  if (e.rank < 0 || e.rank >= e.world_size) {
    return InvalidArgument(where + Var(n.rank, e.rank) + " is out of range: it must be in 0.." +
                           std::to_string(e.world_size - 1) + " for " +
                           Var(n.world_size, e.world_size));
  }
  if (e.local_world_size < 1 || e.local_world_size > e.world_size) {
    return InvalidArgument(where + Var(n.local_world_size, e.local_world_size) +
                           " is out of range: it must be in 1.." + std::to_string(e.world_size) +
                           " for " + Var(n.world_size, e.world_size));
  }
  if (e.local_rank < 0 || e.local_rank >= e.local_world_size) {
    return InvalidArgument(where + Var(n.local_rank, e.local_rank) +
                           " is out of range: it must be less than " +
                           Var(n.local_world_size, e.local_world_size));
  }
  if (e.node_rank < 0) {
    return InvalidArgument(where + Var(n.node_rank, e.node_rank) + " must not be negative");
  }
  return Status::Ok();
}

Status ParsePort(const std::string &text, const char *name, int *port) {
  int64_t value = 0;
  DST_RETURN_IF_ERROR(ParseInt(text, name, &value));
  if (value < 1 || value > 65535) {
    return InvalidArgument("launch environment: " + Show(name, text) +
                           " is out of range: a port must be in 1..65535");
  }
  *port = static_cast<int>(value);
  return Status::Ok();
}

// MASTER_ADDR (else `addr_fallback_var`, if given and set) and MASTER_PORT
// (else `default_port`). A job spanning nodes without any address is an
// error: the default 127.0.0.1 would only find rank 0 on its own node.
Status ReadMaster(const Env &env, const char *addr_fallback_var, int default_port, LaunchEnv *e) {
  if (const std::string *addr = Find(env, "MASTER_ADDR")) {
    e->master_addr = *addr;
  } else if (addr_fallback_var != nullptr && Has(env, addr_fallback_var)) {
    e->master_addr = *Find(env, addr_fallback_var);
  } else if (e->world_size > e->local_world_size) {
    return InvalidArgument("launch environment: the " + std::to_string(e->world_size) +
                           " ranks span several nodes (" + std::to_string(e->local_world_size) +
                           " on this one) but MASTER_ADDR is not set: export "
                           "MASTER_ADDR=<host of rank 0> (and MASTER_PORT) to every rank, e.g. "
                           "`mpirun -x MASTER_ADDR=node0 -x MASTER_PORT=29500 ...`");
  }
  e->master_port = default_port;
  if (const std::string *port = Find(env, "MASTER_PORT")) {
    DST_RETURN_IF_ERROR(ParsePort(*port, "MASTER_PORT", &e->master_port));
  }
  return Status::Ok();
}

std::string TokenOrEmpty(const Env &env) {
  const std::string *token = Find(env, "DSTRAIN_JOB_TOKEN");
  return token == nullptr ? "" : *token;
}

Result<LaunchEnv> FromTorchrun(const Env &env) {
  // dstrain launch sets NODE_RANK, torchrun GROUP_RANK.
  const char *node_var = Has(env, "NODE_RANK") ? "NODE_RANK" : "GROUP_RANK";
  const VarNames names{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", node_var};
  LaunchEnv e;
  e.launcher = "dstrain/torchrun";
  DST_RETURN_IF_ERROR(RequireInt(env, "RANK", "WORLD_SIZE is", &e.rank));
  DST_RETURN_IF_ERROR(RequireInt(env, "WORLD_SIZE", "RANK is", &e.world_size));
  // Without LOCAL_*: every rank on this node (a hand-started single-node job).
  DST_RETURN_IF_ERROR(OptionalInt(env, "LOCAL_RANK", e.rank, &e.local_rank));
  DST_RETURN_IF_ERROR(OptionalInt(env, "LOCAL_WORLD_SIZE", e.world_size, &e.local_world_size));
  // Validated before the division below.
  DST_RETURN_IF_ERROR(ValidateRanks(e, names));
  DST_RETURN_IF_ERROR(OptionalInt(env, node_var, e.rank / e.local_world_size, &e.node_rank));
  DST_RETURN_IF_ERROR(ValidateRanks(e, names));
  DST_RETURN_IF_ERROR(ReadMaster(env, nullptr, kDefaultPort, &e));
  e.job_token = TokenOrEmpty(env);
  return e;
}

// Open MPI gives every rank of one mpirun the same job id; Open MPI 5 (PRRTE)
// names the job by its PMIx namespace instead.
std::string OpenMpiToken(const Env &env) {
  if (const std::string *token = Find(env, "DSTRAIN_JOB_TOKEN")) return *token;
  if (const std::string *id = Find(env, "OMPI_MCA_ess_base_jobid")) return "ompi-" + *id;
  if (const std::string *ns = Find(env, "PMIX_NAMESPACE")) return "pmix-" + *ns;
  return "";
}

Result<LaunchEnv> FromOpenMpi(const Env &env) {
  constexpr VarNames kNames{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                            "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                            "the node index"};
  LaunchEnv e;
  e.launcher = "mpirun";
  DST_RETURN_IF_ERROR(
      RequireInt(env, kNames.rank, "OMPI_COMM_WORLD_SIZE is (started by mpirun?)", &e.rank));
  DST_RETURN_IF_ERROR(RequireInt(env, kNames.world_size,
                                 "OMPI_COMM_WORLD_RANK is (started by mpirun?)", &e.world_size));
  DST_RETURN_IF_ERROR(OptionalInt(env, kNames.local_rank, e.rank, &e.local_rank));
  DST_RETURN_IF_ERROR(OptionalInt(env, kNames.local_world_size, e.world_size, &e.local_world_size));
  DST_RETURN_IF_ERROR(ValidateRanks(e, kNames));
  e.node_rank = e.rank / e.local_world_size;
  DST_RETURN_IF_ERROR(ReadMaster(env, nullptr, kDefaultPort, &e));
  e.job_token = OpenMpiToken(env);
  return e;
}

// One entry of a Slurm tasks-per-node list: "4" or "4(x2)".
bool ParseTasksEntry(std::string_view item, int64_t *tasks, int64_t *repeat) {
  *repeat = 1;
  const size_t paren = item.find('(');
  std::string_view count = item.substr(0, paren);
  auto [stop, error] = std::from_chars(count.data(), count.data() + count.size(), *tasks);
  if (error != std::errc() || stop != count.data() + count.size() || *tasks < 0) return false;
  if (paren == std::string_view::npos) return true;
  std::string_view times = item.substr(paren);
  if (times.size() < 4 || times.substr(0, 2) != "(x" || times.back() != ')') return false;
  times = times.substr(2, times.size() - 3);
  auto [stop2, error2] = std::from_chars(times.data(), times.data() + times.size(), *repeat);
  return error2 == std::errc() && stop2 == times.data() + times.size() && *repeat >= 1;
}

// The task count of node `node` in a list such as "2(x3),1".
Status TasksOnNode(const char *name, const std::string &spec, int64_t node, int64_t *tasks) {
  int64_t first_node = 0;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = spec.find(',', pos);
    const std::string_view item = std::string_view(spec).substr(
        pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int64_t count = 0, repeat = 1;
    if (!ParseTasksEntry(item, &count, &repeat)) {
      return InvalidArgument("launch environment: " + Show(name, spec) +
                             " is not a Slurm tasks-per-node list such as '2(x3),1'");
    }
    if (node < first_node + repeat) {
      *tasks = count;
      return Status::Ok();
    }
    first_node += repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return InvalidArgument("launch environment: SLURM_NODEID=" + std::to_string(node) +
                         " is beyond the " + std::to_string(first_node) + " nodes listed in " +
                         Show(name, spec));
}

// Sets `*source` to the variable it used, for later messages.
Status SlurmLocalSize(const Env &env, int64_t node, int64_t *local_size, const char **source) {
  // The step's own layout first: srun -n may use fewer tasks than the job.
  for (const char *list_var :
       {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const std::string *value = Find(env, list_var);
    if (value == nullptr) continue;
    *source = list_var;
    // SLURM_NTASKS_PER_NODE is one number; the others are per-node lists.
    if (std::string_view(list_var) == "SLURM_NTASKS_PER_NODE") {
      return ParseInt(*value, list_var, local_size);
    }
    return TasksOnNode(list_var, *value, node, local_size);
  }
  return InvalidArgument(
      "launch environment: SLURM_PROCID is set but none of SLURM_STEP_TASKS_PER_NODE, "
      "SLURM_NTASKS_PER_NODE and SLURM_TASKS_PER_NODE is: cannot tell how many ranks run on "
      "this node (start the job with srun)");
}

Result<LaunchEnv> FromSlurm(const Env &env) {
  VarNames names{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_TASKS_PER_NODE",
                 "SLURM_NODEID"};
  LaunchEnv e;
  e.launcher = "slurm";
  DST_RETURN_IF_ERROR(RequireInt(env, "SLURM_PROCID", "SLURM_NTASKS is", &e.rank));
  names.world_size = Has(env, "SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  DST_RETURN_IF_ERROR(RequireInt(env, names.world_size, "SLURM_PROCID is (start the job with srun)",
                                 &e.world_size));
  DST_RETURN_IF_ERROR(OptionalInt(env, "SLURM_NODEID", 0, &e.node_rank));
  if (e.node_rank < 0) {  // before it indexes the tasks-per-node list
    return InvalidArgument("launch environment: " + Var("SLURM_NODEID", e.node_rank) +
                           " must not be negative");
  }
  DST_RETURN_IF_ERROR(OptionalInt(env, "SLURM_LOCALID", 0, &e.local_rank));
  DST_RETURN_IF_ERROR(
      SlurmLocalSize(env, e.node_rank, &e.local_world_size, &names.local_world_size));
  DST_RETURN_IF_ERROR(ValidateRanks(e, names));
  int64_t job_id = -1;
  if (const std::string *id = Find(env, "SLURM_JOB_ID")) {
    DST_RETURN_IF_ERROR(ParseInt(*id, "SLURM_JOB_ID", &job_id));
  }
  // Jobs sharing a node get different default ports.
  const int port = job_id >= 0 ? kDefaultPort + static_cast<int>(job_id % 1000) : kDefaultPort;
  DST_RETURN_IF_ERROR(ReadMaster(env, "SLURM_LAUNCH_NODE_IPADDR", port, &e));
  e.job_token = TokenOrEmpty(env);
  if (e.job_token.empty() && job_id >= 0) {
    e.job_token = "slurm-" + std::to_string(job_id);
    if (const std::string *step = Find(env, "SLURM_STEP_ID")) e.job_token += "." + *step;
  }
  return e;
}

Result<LaunchEnv> SingleProcess(const Env &env) {
  LaunchEnv e;
  e.launcher = "single";
  // MASTER_* still count: a single rank may host a store for tools to join.
  DST_RETURN_IF_ERROR(ReadMaster(env, nullptr, kDefaultPort, &e));
  e.job_token = TokenOrEmpty(env);
  return e;
}

}  // namespace

Result<LaunchEnv> DetectLaunchEnv(const Env &env) {
  if (Has(env, "RANK") || Has(env, "WORLD_SIZE")) return FromTorchrun(env);
  if (Has(env, "OMPI_COMM_WORLD_RANK") || Has(env, "OMPI_COMM_WORLD_SIZE")) {
    return FromOpenMpi(env);
  }
  if (Has(env, "SLURM_PROCID")) return FromSlurm(env);
  return SingleProcess(env);
}

Result<LaunchEnv> DetectLaunchEnv() {
  Env env;
  try {
    for (char **entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
      const std::string_view text(*entry);
      const size_t eq = text.find('=');
      if (eq == std::string_view::npos) continue;
      env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
    }
  } catch (const std::bad_alloc &) {
    return InternalError("out of memory reading the process environment");
  }
  return DetectLaunchEnv(env);
}

}  // namespace dst
