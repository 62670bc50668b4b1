// Tests of multi-rank code on threads: `world` ranks in one process joined to
// one TCP store on loopback (rank 0 hosts it), each running the same body.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/gloo_communicator.h"
#include "core/comm/tcp_store.h"

namespace dst::test {

inline constexpr std::chrono::milliseconds kTimeout(5000);

inline TcpStoreOptions StoreOptions(int port, int64_t rank, int64_t world, bool server) {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.is_server = server;
  o.rank = rank;
  o.world_size = world;
  o.job_token = "groups-test";
  o.timeout = kTimeout;
  return o;
}

inline GlooOptions Common(std::chrono::milliseconds timeout = kTimeout) {
  GlooOptions o;
  o.bind_host = "127.0.0.1";
  o.master_addr = "127.0.0.1";
  o.timeout = timeout;
  return o;
}

// Runs body(rank, store) on `world` threads joined to one store (rank 0 hosts it).
inline void RunRanks(int64_t world, const std::function<void(int64_t, Store &)> &body) {
  auto server = TcpStore::Open(StoreOptions(0, 0, world, true));
  ASSERT_TRUE(server.ok()) << server.status().message();
  const int port = server.value()->port();
  std::vector<std::thread> threads;
  for (int64_t r = 1; r < world; ++r)
    threads.emplace_back([&, r] {
      auto store = ConnectTcpStore(StoreOptions(port, r, world, false));
      ASSERT_TRUE(store.ok()) << store.status().message();
      body(r, *store.value());
    });
  body(0, *server.value());
  for (std::thread &t : threads) t.join();
}

}  // namespace dst::test
