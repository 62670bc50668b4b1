// DetectLaunchEnv: every launcher's variables and every validation error,
// each error naming the variable and its value.
#include <cstdlib>
#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/comm/launch_env.h"

namespace dst {
namespace {

using Env = std::map<std::string, std::string>;
using testing::HasSubstr;

LaunchEnv Detect(const Env &env) {
  auto result = DetectLaunchEnv(env);
  EXPECT_TRUE(result.ok()) << result.status().message();
  return result.ok() ? result.value() : LaunchEnv{};
}

// The error message of a detection that must fail with kInvalidArgument.
std::string Error(const Env &env) {
  auto result = DetectLaunchEnv(env);
  EXPECT_FALSE(result.ok());
  if (result.ok()) return "";
  EXPECT_EQ(result.status().code(), Code::kInvalidArgument);
  return result.status().message();
}

Env Torchrun() {
  return {{"RANK", "5"},
          {"WORLD_SIZE", "8"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "4"},
          {"MASTER_ADDR", "node0"},
          {"MASTER_PORT", "29600"},
          {"NODE_RANK", "1"},
          {"DSTRAIN_JOB_TOKEN", "tok"}};
}

Env OpenMpi() {
  return {{"OMPI_COMM_WORLD_RANK", "3"},       {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
          {"MASTER_ADDR", "10.0.0.1"},         {"OMPI_MCA_ess_base_jobid", "3141533697"}};
}

Env Slurm() {
  return {{"SLURM_PROCID", "4"},
          {"SLURM_NTASKS", "7"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NODEID", "2"},
          {"SLURM_TASKS_PER_NODE", "2(x3),1"},
          {"SLURM_JOB_ID", "123456"},
          {"SLURM_LAUNCH_NODE_IPADDR", "10.1.1.1"}};
}

TEST(LaunchEnv, NoLauncherIsASingleProcess) {
  const LaunchEnv e = Detect({{"HOME", "/root"}});
  EXPECT_EQ(e.launcher, "single");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.job_token, "");
}

TEST(LaunchEnv, TorchrunContract) {
  const LaunchEnv e = Detect(Torchrun());
  EXPECT_EQ(e.launcher, "dstrain/torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 29600);
  EXPECT_EQ(e.job_token, "tok");
}

TEST(LaunchEnv, TorchrunDefaultsAndGroupRank) {
  const LaunchEnv e = Detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(e.local_rank, 1);  // single node assumed
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.node_rank, 0);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.job_token, "");  // torchrun sets no token: allowed, with ""
  Env env = Torchrun();
  env.erase("NODE_RANK");
  env["GROUP_RANK"] = "1";
  EXPECT_EQ(Detect(env).node_rank, 1);
  env.erase("GROUP_RANK");
  EXPECT_EQ(Detect(env).node_rank, 1);  // RANK / LOCAL_WORLD_SIZE
}

TEST(LaunchEnv, TorchrunTakesPrecedenceOverMpiAndSlurm) {
  Env env = Torchrun();
  for (const auto &[k, v] : OpenMpi()) env.emplace(k, v);
  for (const auto &[k, v] : Slurm()) env.emplace(k, v);
  EXPECT_EQ(Detect(env).launcher, "dstrain/torchrun");
  Env mpi_and_slurm = OpenMpi();
  for (const auto &[k, v] : Slurm()) mpi_and_slurm.emplace(k, v);
  EXPECT_EQ(Detect(mpi_and_slurm).launcher, "mpirun");
}

TEST(LaunchEnv, OpenMpi) {
  const LaunchEnv e = Detect(OpenMpi());
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.job_token, "ompi-3141533697");  // derived from the job id
}

TEST(LaunchEnv, OpenMpiTokenSources) {
  Env env = OpenMpi();
  env["DSTRAIN_JOB_TOKEN"] = "explicit";
  EXPECT_EQ(Detect(env).job_token, "explicit");
  env.erase("DSTRAIN_JOB_TOKEN");
  env.erase("OMPI_MCA_ess_base_jobid");
  env["PMIX_NAMESPACE"] = "prterun-host-42@1";
  EXPECT_EQ(Detect(env).job_token, "pmix-prterun-host-42@1");
}

TEST(LaunchEnv, OpenMpiAcrossNodesNeedsMasterAddr) {
  Env env = OpenMpi();
  env.erase("MASTER_ADDR");
  const std::string message = Error(env);
  EXPECT_THAT(message, HasSubstr("MASTER_ADDR is not set"));
  EXPECT_THAT(message, HasSubstr("mpirun -x MASTER_ADDR"));
  // On one node the loopback default is right.
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "4";
  EXPECT_EQ(Detect(env).master_addr, "127.0.0.1");
}

TEST(LaunchEnv, Slurm) {
  const LaunchEnv e = Detect(Slurm());
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 4);
  EXPECT_EQ(e.world_size, 7);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 2);  // node 2 of "2(x3),1"
  EXPECT_EQ(e.node_rank, 2);
  EXPECT_EQ(e.master_addr, "10.1.1.1");
  EXPECT_EQ(e.master_port, 29500 + 456);
  EXPECT_EQ(e.job_token, "slurm-123456");
}

TEST(LaunchEnv, SlurmTasksPerNodeSources) {
  Env env = Slurm();
  env["SLURM_PROCID"] = "6";
  env["SLURM_NODEID"] = "3";
  EXPECT_EQ(Detect(env).local_world_size, 1);  // the last entry of "2(x3),1"
  env["SLURM_NTASKS_PER_NODE"] = "3";
  EXPECT_EQ(Detect(env).local_world_size, 3);
  env["SLURM_STEP_TASKS_PER_NODE"] = "4,2(x2),5";
  EXPECT_EQ(Detect(env).local_world_size, 5);  // the step's own layout wins
}

TEST(LaunchEnv, SlurmOverrides) {
  Env env = Slurm();
  env["MASTER_ADDR"] = "head";
  env["MASTER_PORT"] = "40000";
  env["DSTRAIN_JOB_TOKEN"] = "mine";
  env["SLURM_STEP_ID"] = "3";
  LaunchEnv e = Detect(env);
  EXPECT_EQ(e.master_addr, "head");
  EXPECT_EQ(e.master_port, 40000);
  EXPECT_EQ(e.job_token, "mine");
  env.erase("DSTRAIN_JOB_TOKEN");
  EXPECT_EQ(Detect(env).job_token, "slurm-123456.3");
  env.erase("SLURM_JOB_ID");
  env.erase("MASTER_PORT");
  e = Detect(env);
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.job_token, "");
  env["SLURM_NPROCS"] = env["SLURM_NTASKS"];
  env.erase("SLURM_NTASKS");
  EXPECT_EQ(Detect(env).world_size, 7);
}

TEST(LaunchEnv, SlurmErrors) {
  Env env = Slurm();
  env["SLURM_TASKS_PER_NODE"] = "2(x3";
  EXPECT_THAT(Error(env), HasSubstr("SLURM_TASKS_PER_NODE='2(x3' is not a Slurm tasks-per-node"));
  env["SLURM_TASKS_PER_NODE"] = "2(x2)";
  EXPECT_THAT(Error(env), HasSubstr("SLURM_NODEID=2 is beyond the 2 nodes listed"));
  env.erase("SLURM_TASKS_PER_NODE");
  EXPECT_THAT(Error(env), HasSubstr("cannot tell how many ranks run on this node"));
  env = Slurm();
  env["SLURM_JOB_ID"] = "12x";
  EXPECT_THAT(Error(env), HasSubstr("SLURM_JOB_ID='12x' is not an integer"));
  env = Slurm();
  env.erase("SLURM_NTASKS");
  EXPECT_THAT(Error(env), HasSubstr("SLURM_NPROCS is not set"));
  env = Slurm();
  env["SLURM_LOCALID"] = "2";
  EXPECT_THAT(Error(env), HasSubstr("SLURM_LOCALID=2 is out of range"));
  EXPECT_THAT(Error(env), HasSubstr("SLURM_TASKS_PER_NODE=2"));
  env = Slurm();
  env["SLURM_NODEID"] = "-1";
  EXPECT_THAT(Error(env), HasSubstr("SLURM_NODEID=-1 must not be negative"));
  env = Slurm();
  env.erase("SLURM_LAUNCH_NODE_IPADDR");
  EXPECT_THAT(Error(env), HasSubstr("MASTER_ADDR is not set"));
}

TEST(LaunchEnv, NumbersMustParse) {
  Env env = Torchrun();
  env["RANK"] = "one";
  EXPECT_THAT(Error(env), HasSubstr("RANK='one' is not an integer"));
  env = Torchrun();
  env["WORLD_SIZE"] = "8 ";
  EXPECT_THAT(Error(env), HasSubstr("WORLD_SIZE='8 ' is not an integer"));
  env = Torchrun();
  env["LOCAL_RANK"] = "1.5";
  EXPECT_THAT(Error(env), HasSubstr("LOCAL_RANK='1.5' is not an integer"));
  env = Torchrun();
  env["LOCAL_WORLD_SIZE"] = "99999999999999999999";
  EXPECT_THAT(Error(env), HasSubstr("LOCAL_WORLD_SIZE='99999999999999999999' is not an integer"));
  env = Torchrun();
  env["NODE_RANK"] = "x";
  EXPECT_THAT(Error(env), HasSubstr("NODE_RANK='x' is not an integer"));
  env = OpenMpi();
  env["OMPI_COMM_WORLD_RANK"] = "-";
  EXPECT_THAT(Error(env), HasSubstr("OMPI_COMM_WORLD_RANK='-' is not an integer"));
  env = Slurm();
  env["SLURM_PROCID"] = "";  // empty counts as unset: no longer a Slurm job
  EXPECT_EQ(Detect(env).launcher, "single");
}

TEST(LaunchEnv, RanksMustBeInRange) {
  Env env = Torchrun();
  env["RANK"] = "8";
  EXPECT_THAT(Error(env), HasSubstr("RANK=8 is out of range: it must be in 0..7 for WORLD_SIZE=8"));
  env["RANK"] = "-1";
  EXPECT_THAT(Error(env), HasSubstr("RANK=-1 is out of range"));
  env = Torchrun();
  env["WORLD_SIZE"] = "0";
  EXPECT_THAT(Error(env), HasSubstr("WORLD_SIZE=0 must be at least 1"));
  env = Torchrun();
  env["LOCAL_RANK"] = "4";
  EXPECT_THAT(Error(env),
              HasSubstr("LOCAL_RANK=4 is out of range: it must be less than LOCAL_WORLD_SIZE=4"));
  env = Torchrun();
  env["LOCAL_WORLD_SIZE"] = "9";
  EXPECT_THAT(Error(env), HasSubstr("LOCAL_WORLD_SIZE=9 is out of range"));
  env = Torchrun();
  env["NODE_RANK"] = "-2";
  EXPECT_THAT(Error(env), HasSubstr("NODE_RANK=-2 must not be negative"));
  env = OpenMpi();
  env["OMPI_COMM_WORLD_RANK"] = "4";
  EXPECT_THAT(Error(env), HasSubstr("OMPI_COMM_WORLD_RANK=4 is out of range"));
  EXPECT_THAT(Error(env), HasSubstr("OMPI_COMM_WORLD_SIZE=4"));
}

TEST(LaunchEnv, HalfATorchrunContractIsAnError) {
  EXPECT_THAT(Error({{"RANK", "0"}}), HasSubstr("WORLD_SIZE is not set, but RANK is"));
  EXPECT_THAT(Error({{"WORLD_SIZE", "2"}}), HasSubstr("RANK is not set, but WORLD_SIZE is"));
  EXPECT_THAT(Error({{"OMPI_COMM_WORLD_RANK", "0"}}), HasSubstr("OMPI_COMM_WORLD_SIZE is not set"));
}

TEST(LaunchEnv, PortMustBeValid) {
  Env env = Torchrun();
  env["MASTER_PORT"] = "0";
  EXPECT_THAT(Error(env), HasSubstr("MASTER_PORT='0' is out of range: a port must be in 1..65535"));
  env["MASTER_PORT"] = "65536";
  EXPECT_THAT(Error(env), HasSubstr("MASTER_PORT='65536' is out of range"));
  env["MASTER_PORT"] = "http";
  EXPECT_THAT(Error(env), HasSubstr("MASTER_PORT='http' is not an integer"));
  EXPECT_THAT(Error({{"MASTER_PORT", "-5"}}), HasSubstr("MASTER_PORT='-5'"));  // single, too
  env["MASTER_PORT"] = "65535";
  EXPECT_EQ(Detect(env).master_port, 65535);
}

TEST(LaunchEnv, ReadsTheProcessEnvironment) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "3", 1);
  setenv("DSTRAIN_JOB_TOKEN", "from-environ", 1);
  auto e = DetectLaunchEnv();
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("DSTRAIN_JOB_TOKEN");
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->world_size, 3);
  EXPECT_EQ(e->job_token, "from-environ");
}

}  // namespace
}  // namespace dst
