// Bandwidth of a communicator's collectives over message sizes, measured and
// reported by nccl-tests' definitions (what `dstrain comm-bench` prints):
//   algbw = bytes / time, where bytes is the whole buffer of the operation
//           (all-reduce: the reduced vector; all-gather: the gathered result;
//           reduce-scatter: the vector before it is scattered);
//   busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather and
//           reduce-scatter, x 1 for broadcast, reduce and send/recv;
// the time is the mean over `iters` back-to-back operations after `warmup`,
// taken on every rank and reported for the slowest one. Before timing, each
// operation runs once on rank-dependent data and every rank checks the
// result ("errors" counts wrong elements, as nccl-tests' #wrong does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/common/status.h"

namespace dst {

// The operations, by the names the report and `--ops` use.
enum class BenchOp { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kSendRecv };

struct CommBenchOptions {
  std::vector<BenchOp> ops;  // empty: all of them
  int64_t min_bytes = 4096;  // message sizes min_bytes, x factor, ... <= max_bytes
  int64_t max_bytes = int64_t(64) << 20;
  int64_t factor = 4;
  int64_t iters = 0;  // 0: 50 up to 1 MiB, 10 above
  int64_t warmup = 2;
};

struct CommBenchRow {
  BenchOp op;
  int64_t bytes = 0;  // as nccl-tests counts them (see above), a multiple of 4 * group size
  int64_t iters = 0;
  double seconds = 0;  // mean time of one operation on the slowest rank
  double algbw = 0;    // bytes per second
  double busbw = 0;
  int64_t errors = 0;  // wrong elements of the checked run, over all ranks
};

const char *BenchOpName(BenchOp op);

// "allreduce,allgather,..." (also "all"); an unknown name is an error that
// lists the known ones.
Result<std::vector<BenchOp>> ParseBenchOps(const std::string &list);

// The sizes the options ask for, each rounded down to a multiple of
// 4 * group_size bytes (at least that). Errors name a bad range or factor.
Result<std::vector<int64_t>> BenchSizes(const CommBenchOptions &options, int64_t group_size);

// Runs every (size, op) on `comm`, send/recv on `p2p` (the same members on
// connections of their own, as the pipeline's are: a socket a collective ran
// on sends one-way messages slowly); every rank of the group calls it with
// the same options. A group of one rank is refused (nothing to measure).
Result<std::vector<CommBenchRow>> RunCommBench(Communicator &comm, Communicator &p2p,
                                               const CommBenchOptions &options);

// {"group", "ranks", "backend", "rows": [{op, bytes, iters, time_us, algbw_GBps,
// busbw_GBps, errors}]}
std::string CommBenchJson(const std::vector<CommBenchRow> &rows, const std::string &group,
                          int64_t ranks, const std::string &backend);

}  // namespace dst
