// Internal to the TCP store: the server rank 0 hosts. One background thread
// runs a poll() loop over the listening socket, every client connection and a
// wake-up pipe; nothing in it blocks, so one slow or silent client cannot
// stall the others. Blocking Get/Wait requests are parked as waiters and
// answered when a Set/Add provides their keys or when their deadline passes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "core/comm/tcp_store_socket.h"
#include "core/common/status.h"

namespace dst::tcp_store {

// Who may join: the handshake compares these with what each client sends.
struct ServerIdentity {
  std::string job_token;
  int64_t world_size = 1;
};

class StoreServer {
 public:
  // Binds the port (0 = any free port) on every interface and starts the
  // thread. `master_host` only appears in error messages.
  static Result<std::unique_ptr<StoreServer>> Start(const std::string &master_host, int port,
                                                    ServerIdentity identity);
  // Stops the thread and closes every connection, so clients blocked in a
  // Get/Wait see the connection close at once instead of waiting out their
  // timeout.
  ~StoreServer();
  StoreServer(const StoreServer &) = delete;
  StoreServer &operator=(const StoreServer &) = delete;

  int port() const { return port_; }

  class Loop;  // the thread's state (tcp_store_server.cc)

 private:
  StoreServer() = default;

  int port_ = 0;
  UniqueFd wake_write_;  // one byte written here ends the loop
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace dst::tcp_store
