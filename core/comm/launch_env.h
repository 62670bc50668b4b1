// Who am I: this process's place in a multi-process job, read from the
// environment its launcher set. Sources, first match wins:
//
//   1. torchrun's contract (also what `dstrain launch` sets): RANK, WORLD_SIZE,
//      LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and NODE_RANK
//      (torchrun: GROUP_RANK). LOCAL_* default to a single node (LOCAL_RANK =
//      RANK, LOCAL_WORLD_SIZE = WORLD_SIZE).
//   2. Open MPI's mpirun: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE.
//      The node index is RANK / LOCAL_SIZE (mpirun's default by-slot mapping
//      with the same number of ranks per node). Open MPI does not say where
//      rank 0 runs, so a job spanning nodes needs MASTER_ADDR exported
//      (`mpirun -x MASTER_ADDR=host0 ...`).
//   3. Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID and
//      the tasks per node from SLURM_STEP_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE
//      or SLURM_TASKS_PER_NODE ("2(x3),1" = 2 on each of the first 3 nodes, 1 on
//      the 4th); MASTER_ADDR else SLURM_LAUNCH_NODE_IPADDR; MASTER_PORT else
//      29500 + SLURM_JOB_ID % 1000, so concurrent jobs on a node do not collide.
//   4. None of these: a single process (rank 0 of 1).
//
// The job token (DSTRAIN_JOB_TOKEN) keeps processes of other jobs out of the
// rendezvous store. `dstrain launch` always sets it. Under mpirun or Slurm
// without it, a token is derived from the job id (every rank of the job sees
// the same id). Under torchrun or hand-set RANK/WORLD_SIZE without it, the
// token is "" and only the rendezvous address separates jobs.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/common/status.h"

namespace dst {

struct LaunchEnv {
  int64_t rank = 0, world_size = 1, local_rank = 0, local_world_size = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string job_token;  // DSTRAIN_JOB_TOKEN ("" allowed only when world_size == 1, or
                          // under torchrun / hand-set RANK and WORLD_SIZE: see above)
  std::string launcher;   // "single", "dstrain/torchrun", "mpirun", "slurm"
};

// From the process environment.
Result<LaunchEnv> DetectLaunchEnv();
// From `env` (testable). Errors are kInvalidArgument and name the variable and
// its value: "RANK=4 is out of range: it must be less than WORLD_SIZE=4".
Result<LaunchEnv> DetectLaunchEnv(const std::map<std::string, std::string> &env);

}  // namespace dst
