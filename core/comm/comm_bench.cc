#include "core/comm/comm_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

namespace dst {

namespace {

using Clock = std::chrono::steady_clock;

constexpr BenchOp kAllOps[] = {BenchOp::kAllReduce, BenchOp::kAllGather, BenchOp::kReduceScatter,
                               BenchOp::kBroadcast, BenchOp::kReduce,    BenchOp::kSendRecv};
constexpr uint32_t kSendRecvTag = 0x62656e63;  // "benc"

// busbw / algbw by nccl-tests' definitions.
double BusFactor(BenchOp op, double n) {
  switch (op) {
    case BenchOp::kAllReduce:
      return 2 * (n - 1) / n;
    case BenchOp::kAllGather:
    case BenchOp::kReduceScatter:
      return (n - 1) / n;
    default:
      return 1;
  }
}

// One operation over `count` floats of `buf` (the whole vector as nccl-tests
// counts it); send/recv sends `count` floats to the next rank and receives
// as many from the previous one into the second half of `buf`.
Status RunOnce(Communicator &comm, BenchOp op, std::vector<float> &buf, int64_t count) {
  const int64_t n = comm.size(), rank = comm.rank();
  switch (op) {
    case BenchOp::kAllReduce:
      return comm.AllReduceSum(buf.data(), count)->Wait();
    case BenchOp::kAllGather:
      return comm.AllGather(buf.data(), count / n)->Wait();
    case BenchOp::kReduceScatter:
      return comm.ReduceScatterSum(buf.data(), count / n)->Wait();
    case BenchOp::kBroadcast:
      return comm.Broadcast(buf.data(), count, 0)->Wait();
    case BenchOp::kReduce:
      return comm.ReduceSum(buf.data(), count, 0)->Wait();
    case BenchOp::kSendRecv: {
      const int64_t bytes = count * int64_t(sizeof(float));
      std::unique_ptr<Work> recv =
          comm.Recv(buf.data() + count, bytes, (rank + n - 1) % n, kSendRecvTag);
      std::unique_ptr<Work> send = comm.Send(buf.data(), bytes, (rank + 1) % n, kSendRecvTag);
      Status sent = send->Wait();
      Status received = recv->Wait();
      return sent.ok() ? received : sent;
    }
  }
  return InternalError("comm bench: unknown operation");
}

// Rank r's input value at element i of the checked run.
float Input(int64_t rank, int64_t i) {
  return float(rank + 1) + float(i % 7);
}

// Fills `buf` for the checked run of `op`, runs it, and counts the elements
// this rank holds that differ from what the operation must produce.
Result<int64_t> CheckedRun(Communicator &comm, BenchOp op, std::vector<float> &buf, int64_t count) {
  const int64_t n = comm.size(), rank = comm.rank(), shard = count / n;
  for (int64_t i = 0; i < int64_t(buf.size()); ++i) buf[size_t(i)] = Input(rank, i);
  DST_RETURN_IF_ERROR(RunOnce(comm, op, buf, count));
  // The sum over ranks of Input(r, i): n(n+1)/2 + n * (i % 7).
  auto sum = [&](int64_t i) { return float(n * (n + 1) / 2) + float(n) * float(i % 7); };
  int64_t wrong = 0;
  auto expect = [&](int64_t at, float want) { wrong += buf[size_t(at)] != want; };
  switch (op) {
    case BenchOp::kAllReduce:
      for (int64_t i = 0; i < count; ++i) expect(i, sum(i));
      break;
    case BenchOp::kAllGather:
      for (int64_t i = 0; i < count; ++i) expect(i, Input(i / shard, i));
      break;
    case BenchOp::kReduceScatter:
      for (int64_t i = rank * shard; i < (rank + 1) * shard; ++i) expect(i, sum(i));
      break;
    case BenchOp::kBroadcast:
      for (int64_t i = 0; i < count; ++i) expect(i, Input(0, i));
      break;
    case BenchOp::kReduce:
      if (rank == 0)
        for (int64_t i = 0; i < count; ++i) expect(i, sum(i));
      break;
    case BenchOp::kSendRecv:
      for (int64_t i = 0; i < count; ++i) expect(count + i, Input((rank + n - 1) % n, i));
      break;
  }
  return wrong;
}

// Over the group: the slowest rank's seconds and the wrong elements of all ranks.
Status GroupTotals(Communicator &comm, CommBenchRow *row) {
  std::vector<float> all(size_t(2 * comm.size()), 0.0f);
  all[size_t(2 * comm.rank())] = float(row->seconds);
  all[size_t(2 * comm.rank() + 1)] = float(row->errors);
  DST_RETURN_IF_ERROR(comm.AllGather(all.data(), 2)->Wait());
  row->seconds = 0;
  row->errors = 0;
  for (int64_t r = 0; r < comm.size(); ++r) {
    row->seconds = std::max(row->seconds, double(all[size_t(2 * r)]));
    row->errors += int64_t(all[size_t(2 * r + 1)]);
  }
  return Status::Ok();
}

Result<CommBenchRow> Measure(Communicator &comm, BenchOp op, int64_t bytes,
                             const CommBenchOptions &options) {
  const int64_t count = bytes / int64_t(sizeof(float));
  std::vector<float> buf(size_t(op == BenchOp::kSendRecv ? 2 * count : count));
  CommBenchRow row;
  row.op = op;
  row.bytes = bytes;
  row.iters = options.iters > 0 ? options.iters : (bytes <= (int64_t(1) << 20) ? 50 : 10);
  Result<int64_t> wrong = CheckedRun(comm, op, buf, count);
  if (!wrong.ok()) return wrong.status();
  row.errors = wrong.value();
  // Zeros while timing: repeated sums stay finite.
  std::fill(buf.begin(), buf.end(), 0.0f);
  for (int64_t i = 0; i < options.warmup; ++i) DST_RETURN_IF_ERROR(RunOnce(comm, op, buf, count));
  DST_RETURN_IF_ERROR(comm.Barrier());
  const Clock::time_point start = Clock::now();
  for (int64_t i = 0; i < row.iters; ++i) DST_RETURN_IF_ERROR(RunOnce(comm, op, buf, count));
  row.seconds = std::chrono::duration<double>(Clock::now() - start).count() / row.iters;
  DST_RETURN_IF_ERROR(GroupTotals(comm, &row));
  row.algbw = row.seconds > 0 ? double(bytes) / row.seconds : 0;
  row.busbw = row.algbw * BusFactor(op, double(comm.size()));
  return row;
}

}  // namespace

const char *BenchOpName(BenchOp op) {
  switch (op) {
    case BenchOp::kAllReduce:
      return "allreduce";
    case BenchOp::kAllGather:
      return "allgather";
    case BenchOp::kReduceScatter:
      return "reduce_scatter";
    case BenchOp::kBroadcast:
      return "broadcast";
    case BenchOp::kReduce:
      return "reduce";
    case BenchOp::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

Result<std::vector<BenchOp>> ParseBenchOps(const std::string &list) {
  std::vector<BenchOp> ops;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string name = list.substr(begin, end - begin);
    begin = end + 1;
    if (name == "all") {
      ops.assign(std::begin(kAllOps), std::end(kAllOps));
      continue;
    }
    const BenchOp *found = std::find_if(std::begin(kAllOps), std::end(kAllOps),
                                        [&](BenchOp op) { return name == BenchOpName(op); });
    if (found == std::end(kAllOps))
      return InvalidArgument("unknown collective \"" + name +
                             "\": use allreduce, allgather, reduce_scatter, broadcast, reduce, "
                             "sendrecv or all, separated by commas");
    ops.push_back(*found);
  }
  return ops;
}

Result<std::vector<int64_t>> BenchSizes(const CommBenchOptions &options, int64_t group_size) {
  if (options.min_bytes <= 0 || options.max_bytes < options.min_bytes)
    return InvalidArgument("message sizes from " + std::to_string(options.min_bytes) + " to " +
                           std::to_string(options.max_bytes) +
                           " bytes: need 0 < min_bytes <= max_bytes");
  if (options.factor < 2)
    return InvalidArgument("size factor " + std::to_string(options.factor) +
                           ": need 2 or more (sizes grow by it)");
  if (options.iters < 0 || options.warmup < 0)
    return InvalidArgument("iters and warmup must not be negative");
  const int64_t unit = int64_t(sizeof(float)) * group_size;
  std::vector<int64_t> sizes;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= options.factor) {
    const int64_t rounded = std::max(unit, bytes / unit * unit);
    if (sizes.empty() || sizes.back() != rounded) sizes.push_back(rounded);
    if (bytes > options.max_bytes / options.factor) break;
  }
  return sizes;
}

Result<std::vector<CommBenchRow>> RunCommBench(Communicator &comm, Communicator &p2p,
                                               const CommBenchOptions &options) {
  if (comm.size() < 2)
    return InvalidArgument("the " + comm.name() +
                           " group has one rank: a collective needs 2 or more (run under "
                           "`dstrain launch --nproc-per-node 2`)");
  Result<std::vector<int64_t>> sizes = BenchSizes(options, comm.size());
  if (!sizes.ok()) return sizes.status();
  std::vector<BenchOp> ops = options.ops;
  if (ops.empty()) ops.assign(std::begin(kAllOps), std::end(kAllOps));
  std::vector<CommBenchRow> rows;
  for (BenchOp op : ops)
    for (int64_t bytes : sizes.value()) {
      Result<CommBenchRow> row = Measure(op == BenchOp::kSendRecv ? p2p : comm, op, bytes, options);
      if (!row.ok()) return row.status();
      rows.push_back(row.value());
    }
  return rows;
}

std::string CommBenchJson(const std::vector<CommBenchRow> &rows, const std::string &group,
                          int64_t ranks, const std::string &backend) {
  nlohmann::json out = {{"group", group}, {"ranks", ranks}, {"backend", backend}};
  nlohmann::json list = nlohmann::json::array();
  for (const CommBenchRow &r : rows)
    list.push_back({{"op", BenchOpName(r.op)},
                    {"bytes", r.bytes},
                    {"iters", r.iters},
                    {"time_us", r.seconds * 1e6},
                    {"algbw_GBps", r.algbw / 1e9},
                    {"busbw_GBps", r.busbw / 1e9},
                    {"errors", r.errors}});
  out["rows"] = std::move(list);
  return out.dump();
}

}  // namespace dst
