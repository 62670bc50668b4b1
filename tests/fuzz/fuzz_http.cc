// HTTP requests to the monitor. The front (metrics/http_front.h) owns the
// public socket: each input is sent to it as it is, the connection half-closed
// and the answer read to its end, with a stand-in backend behind it that
// answers every whole request it is relayed (CivetWeb's threads have a fixed
// 100 KiB stack a sanitizer overflows, and its parser is not ours to fuzz).
// The answer must be empty or HTTP. The input also goes through the server's
// own rules: the path check and the bearer-token comparison.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "metrics/http_front.h"
#include "metrics/http_server.h"

namespace {

int Listen(int *port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
      listen(fd, 64) != 0)
    std::abort();
  socklen_t length = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &length);
  *port = ntohs(addr.sin_port);
  return fd;
}

// Answers each relayed request once its headers (as the front passes them
// on: with the peer header first) have arrived.
void Backend(int listener) {
  for (;;) {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    std::string in;
    char buffer[4096];
    for (ssize_t n; in.find("\r\n\r\n") == std::string::npos &&
                    in.find("\n\n") == std::string::npos &&
                    (n = recv(fd, buffer, sizeof buffer, 0)) > 0;)
      in.append(buffer, size_t(n));
    if (in.find(dst::metrics::kPeerHeader) == std::string::npos) std::abort();
    static constexpr std::string_view kOk = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
    (void)!send(fd, kOk.data(), kOk.size(), MSG_NOSIGNAL);
    close(fd);
  }
}

int FrontPort() {
  static const int port = [] {
    int backend_port = 0;
    const int listener = Listen(&backend_port);
    std::thread(Backend, listener).detach();
    dst::metrics::HttpFrontOptions options;
    options.host = "127.0.0.1";
    options.backend_port = backend_port;
    options.peer_secret = "fuzz";
    options.header_timeout = std::chrono::milliseconds(200);
    options.max_header_bytes = 4096;
    int bind_error = 0;
    auto started = dst::metrics::HttpFront::Start(options, &bind_error);
    if (!started.ok()) std::abort();
    static std::unique_ptr<dst::metrics::HttpFront> front = std::move(started).value();
    return front->port();
  }();
  return port;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view text(reinterpret_cast<const char *>(data), size);
  (void)dst::metrics::IsSafeRequestPath(text);
  (void)dst::metrics::BearerTokenMatches(text, "fuzz-token");

  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(FrontPort()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Closed with a reset, not FIN: hundreds of thousands of connections a
  // minute would otherwise fill the ephemeral ports with TIME_WAIT.
  const linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) {
    // libFuzzer's timer (SIGALRM) may interrupt it; the connection goes on.
    pollfd p{fd, POLLOUT, 0};
    int error = errno;
    socklen_t length = sizeof error;
    if (error == EINTR && poll(&p, 1, 5000) == 1)
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0 && error != EINTR) {
      errno = error;
      std::perror("fuzz_http: connecting to the front");
      std::abort();
    }
  }
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the front may close early (431)
    sent += size_t(n);
  }
  shutdown(fd, SHUT_WR);
  std::string answer;
  char buffer[4096];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    answer.append(buffer, size_t(n));
  }
  close(fd);
  if (!answer.empty() && answer.rfind("HTTP/1.1 ", 0) != 0) std::abort();
  return 0;
}
