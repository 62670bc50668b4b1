// The nodes an autotuning trial runs on. One node: `dstrain launch` here.
// Several (a DeepSpeed hostfile): the tuner, on the first host, starts one
// launcher per host for every trial — its own directly, the others through a
// remote command ("ssh {host}" by default), as DeepSpeed's autotuner does
// through its pdsh runner — all with the same job token, node count and
// rendezvous address. The dstrain executable, the config and exps_dir must be
// at the same paths on every host (a shared file system).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dstrain_cli {

struct TrialNodes {
  std::vector<std::string> hosts;                      // hosts[0] is where the tuner runs
  int64_t slots = 1;                                   // ranks per host
  std::string master_addr;                             // hosts[0]'s address as the others reach it
  std::string remote = "ssh -o BatchMode=yes {host}";  // the command prefix for hosts[1..]
  int64_t world() const { return int64_t(hosts.size()) * slots; }
};

// Reads a DeepSpeed hostfile: one "HOST slots=N" a line, '#' comments. Every
// host must have the same slot count (one --nproc-per-node for all).
TrialNodes ReadHostfile(const std::string &path);

// One launcher's command line of a trial.
struct NodeCommand {
  std::vector<std::string> argv;
  std::string host;
};
// The commands that start a trial of `program` on every node, node 0's
// first: `self launch` with the node's rank (and, on other hosts, the remote
// prefix and `env DSTRAIN_JOB_TOKEN=token`).
std::vector<NodeCommand> TrialCommands(const TrialNodes &nodes, const std::string &self,
                                       int64_t master_port, const std::string &token,
                                       const std::vector<std::string> &program);

// argv as one line a POSIX shell reads back as the same words.
std::string ShellQuoted(const std::vector<std::string> &argv);

// The commands of TrialCommands as shell lines to keep in a file: the job
// token is never written; the other nodes' lines pass on the reader's
// $DSTRAIN_JOB_TOKEN, and with more than one node a comment first says to
// export one (node 0's launcher reads it from its environment).
std::string CommandLines(const TrialNodes &nodes, const std::string &self, int64_t master_port,
                         const std::vector<std::string> &program);

}  // namespace dstrain_cli
