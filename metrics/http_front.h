// The monitor's public socket. CivetWeb gives every open connection one of
// a fixed number of worker threads until the request has arrived, so clients
// that open connections and never finish their headers (slow or hostile)
// queue every scrape behind them. The front owns the public listening socket
// instead: one thread with poll() holds any number of connections while they
// send their headers (each with a deadline, a bound per client address and a
// bound in all, the oldest unfinished one dropped first), and only a
// connection whose headers are complete is relayed to CivetWeb, listening on
// loopback. A scrape therefore never waits behind an unfinished request.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/common/status.h"

namespace dst::metrics {

struct HttpFrontOptions {
  std::string host;      // "127.0.0.1", "[::1]", "0.0.0.0": as ListenHost gives it
  int port = 0;          // 0 = any free port
  int backend_port = 0;  // CivetWeb's, on 127.0.0.1
  // Sent to the backend in kPeerHeader with the client's address, so that
  // CivetWeb's handler can tell the real client from the front.
  std::string peer_secret;
  std::chrono::milliseconds header_timeout{10000};
  // Connections still sending their headers: in all, and from one address.
  // Past either bound the oldest such connection is closed.
  int max_pending = 512;
  int max_pending_per_client = 128;
  size_t max_header_bytes = 16 * 1024;  // past it: 431, closed
  // A relayed exchange that moves no byte for this long is closed.
  std::chrono::milliseconds idle_timeout{30000};
};

// The header the front adds to each relayed request: "<secret> <address>".
inline constexpr const char *kPeerHeader = "X-Dstrain-Peer";

class HttpFront {
 public:
  // Binds and listens on host:port and starts the thread. Errors name the
  // address and the reason; *bind_error is the errno of a failed bind (0
  // otherwise), for the caller's advice (a port in use, ...).
  static Result<std::unique_ptr<HttpFront>> Start(const HttpFrontOptions &options, int *bind_error);
  // Stops the thread and closes every connection.
  ~HttpFront();
  HttpFront(const HttpFront &) = delete;
  HttpFront &operator=(const HttpFront &) = delete;

  int port() const;

 private:
  struct Loop;
  explicit HttpFront(std::unique_ptr<Loop> loop);
  std::unique_ptr<Loop> loop_;
};

}  // namespace dst::metrics
