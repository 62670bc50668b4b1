// bench_comm: bus bandwidth of the Gloo communicator's collectives over message
// sizes, by the nccl-tests definitions (busbw = algbw x 2(n-1)/n for
// allreduce, x (n-1)/n for reduce-scatter and allgather, x 1 for reduce and
// broadcast). Run one process per
// rank with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, DSTRAIN_JOB_TOKEN), e.g. `dstrain launch --nproc-per-node 2 --
// build/bench/bench_comm`. Rank 0 prints a table and one JSON line.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/comm/gloo_communicator.h"
#include "core/comm/launch_env.h"
#include "core/comm/store.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  const char *op;
  int64_t bytes;
  double seconds, algbw, busbw;
};

int Fail(const dst::Status &st) {
  std::fprintf(stderr, "bench_comm: %s\n", st.message().c_str());
  return 1;
}

// Median-free best-of timing: `iters` back-to-back collectives after a warm-up.
template <typename Launch>
double TimeCollective(int iters, Launch &&launch, dst::Status *error) {
  for (int i = 0; i < 2; ++i) {
    dst::Status st = launch()->Wait();
    if (!st.ok()) *error = st;
  }
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    dst::Status st = launch()->Wait();
    if (!st.ok()) *error = st;
  }
  return std::chrono::duration<double>(Clock::now() - start).count() / iters;
}

}  // namespace

// Usage: bench_comm [BYTES...]  (default: 4 KiB to 64 MiB in steps of 4x)
int main(int argc, char **argv) {
  dst::Result<dst::LaunchEnv> env = dst::DetectLaunchEnv();
  if (!env.ok()) return Fail(env.status());
  const dst::LaunchEnv &e = env.value();
  if (e.world_size < 2) {
    std::fprintf(stderr, "bench_comm: run it with 2 or more ranks (dstrain launch)\n");
    return 2;
  }
  dst::TcpStoreOptions so;
  so.host = e.master_addr;
  so.port = e.master_port;
  so.is_server = e.rank == 0;
  so.rank = e.rank;
  so.world_size = e.world_size;
  so.job_token = e.job_token;
  so.timeout = std::chrono::seconds(60);
  dst::Result<std::unique_ptr<dst::Store>> store = dst::ConnectTcpStore(so);
  if (!store.ok()) return Fail(store.status());
  dst::GlooOptions go;
  go.name = "bench";
  go.rank = e.rank;
  go.size = e.world_size;
  go.master_addr = e.master_addr;
  go.timeout = std::chrono::seconds(60);
  dst::Result<std::unique_ptr<dst::Communicator>> comm =
      dst::CreateGlooCommunicator(*store.value(), go);
  if (!comm.ok()) return Fail(comm.status());
  dst::Communicator &c = *comm.value();
  const double n = double(e.world_size);

  std::vector<Row> rows;
  dst::Status error;
  std::vector<int64_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty())
    for (int64_t bytes = 1 << 12; bytes <= (int64_t(1) << 26); bytes *= 4) sizes.push_back(bytes);
  for (int64_t bytes : sizes) {
    const int64_t count = bytes / 4;
    const int64_t shard = count / e.world_size;
    std::vector<float> buf(size_t(shard * e.world_size), 1.0f);
    const int iters = bytes <= (1 << 20) ? 50 : 8;
    const double t_ar = TimeCollective(
        iters, [&] { return c.AllReduceSum(buf.data(), count); }, &error);
    const double t_rs = TimeCollective(
        iters, [&] { return c.ReduceScatterSum(buf.data(), shard); }, &error);
    const double t_ag = TimeCollective(
        iters, [&] { return c.AllGather(buf.data(), shard); }, &error);
    const double t_rd = TimeCollective(
        iters, [&] { return c.ReduceSum(buf.data(), count, 0); }, &error);
    const double t_bc = TimeCollective(
        iters, [&] { return c.Broadcast(buf.data(), count, 0); }, &error);
    const double b = double(bytes);
    rows.push_back({"allreduce", bytes, t_ar, b / t_ar, b / t_ar * 2 * (n - 1) / n});
    rows.push_back({"reduce_scatter", bytes, t_rs, b / t_rs, b / t_rs * (n - 1) / n});
    rows.push_back({"allgather", bytes, t_ag, b / t_ag, b / t_ag * (n - 1) / n});
    rows.push_back({"reduce", bytes, t_rd, b / t_rd, b / t_rd});
    rows.push_back({"broadcast", bytes, t_bc, b / t_bc, b / t_bc});
  }
  if (!error.ok()) return Fail(error);
  if (e.rank != 0) return 0;
  std::printf("%-15s %12s %12s %14s %14s\n", "op", "bytes", "time (us)", "algbw (GB/s)",
              "busbw (GB/s)");
  std::string json = "[";
  for (const Row &r : rows) {
    std::printf("%-15s %12lld %12.1f %14.3f %14.3f\n", r.op, static_cast<long long>(r.bytes),
                r.seconds * 1e6, r.algbw / 1e9, r.busbw / 1e9);
    char item[160];
    std::snprintf(item, sizeof item, "%s{\"op\":\"%s\",\"bytes\":%lld,\"busbw_GBps\":%.4f}",
                  json.size() > 1 ? "," : "", r.op, static_cast<long long>(r.bytes), r.busbw / 1e9);
    json += item;
  }
  std::printf("%s]\n", json.c_str());
  return 0;
}
