// The TCP implementation of Store (store.h). ConnectTcpStore is the entry
// point; this header exists so that code which needs the concrete type (a
// test hosting a server on port 0 and reading back the port it got) can
// have it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/store.h"
#include "core/comm/tcp_store_server.h"
#include "core/comm/tcp_store_socket.h"
#include "core/comm/tcp_store_wire.h"

namespace dst {

class TcpStore final : public Store {
 public:
  // What ConnectTcpStore does, returning the concrete type.
  static Result<std::unique_ptr<TcpStore>> Open(const TcpStoreOptions &options);
  // Says this rank finished, so the server does not report it lost.
  ~TcpStore() override;

  Status Set(const std::string &key, const std::vector<uint8_t> &value) override;
  Result<std::vector<uint8_t>> Get(const std::string &key,
                                   std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) override;
  Result<int64_t> Add(const std::string &key, int64_t delta) override;
  Status SetWithin(const std::string &key, const std::vector<uint8_t> &value,
                   std::chrono::milliseconds timeout) override;
  void Abort() override;

  // The server's port: the bound one when the options asked for port 0.
  int port() const { return port_; }

 private:
  TcpStore(const TcpStoreOptions &options, int port);

  // *transport_failed: no reply came (the connection closed or timed out);
  // false for a malformed reply.
  Status Handshake(tcp_store::Clock::time_point deadline, bool *transport_failed);
  // One request and its reply; `doing` prefixes errors. The threads sharing
  // the connection take turns in arrival order (a waiter's slices cannot
  // starve the heartbeat), and the time spent waiting for a turn extends
  // `deadline`: it bounds the server's reply, not this rank's own queue. A
  // transport failure leaves the stream out of step with the server, so it
  // marks the store broken and every later call fails with the same reason.
  // Unless `abortable` is false, the abort signal ends the wait (kAborted).
  Result<tcp_store::Reply> Call(const tcp_store::Request &request,
                                tcp_store::Clock::time_point deadline, const std::string &doing,
                                bool abortable = true);
  std::string TransportFailure(const tcp_store::TransferStatus &status) const;
  // Reply kinds other than the expected one: the server's own error text, or
  // a protocol error.
  Status Unexpected(const tcp_store::Reply &reply, const std::string &doing) const;
  Status TimedOut(const std::vector<std::string> &missing, std::chrono::milliseconds timeout) const;
  // Set and SetWithin: one kSet round trip before `deadline`.
  Status SetBefore(const std::string &key, const std::vector<uint8_t> &value,
                   tcp_store::Clock::time_point deadline, bool abortable);
  std::string Where() const;

  // Declared before the socket so the client connection closes first.
  std::unique_ptr<tcp_store::StoreServer> server_;
  tcp_store::UniqueFd socket_;
  // A ticket lock: the connection's users are served first come, first served.
  class Turns {
   public:
    void lock();
    void unlock();

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    uint64_t next_ = 0, serving_ = 0;
  };
  Turns turns_;
  std::string broken_;  // non-empty: why the connection is unusable
  bool malformed_reply_ = false;  // broken_ by bytes that are not this protocol

  std::string host_;
  int port_ = 0;
  std::string endpoint_;  // host:port, for messages
  std::shared_ptr<const AbortSignal> abort_;
  int64_t rank_ = 0;
  int64_t world_size_ = 1;
  std::string job_token_;
  std::chrono::milliseconds timeout_;
};

}  // namespace dst
