// HttpServer: a small read-only HTTP server on CivetWeb's C API. It owns the
// security rules and hands every request that passes them to one handler:
//   - the bearer token, when set, on every request (else 401, constant-time
//     comparison);
//   - GET and HEAD only (else 405 with "Allow: GET, HEAD");
//   - a path with "." or ".." segments after percent-decoding, a backslash or
//     a control character is 404; nothing is ever served from the file
//     system (no document_root);
//   - every answer carries X-Content-Type-Options: nosniff and a
//     Cache-Control header; HEAD gets the headers without the body.
// The public host:port (port 0: any free port, see port()) belongs to the
// front (http_front.h), which relays only whole requests to CivetWeb on
// loopback: clients that never finish their headers hold no worker. Keep-alive
// off and few worker threads, since clients are a scraper and a dashboard.
// CivetWeb's threads have a small fixed stack (100 KiB in Debian's build, minus
// the process's thread-local storage), so each answer is computed on a short-
// lived thread of ours and CivetWeb's thread only does the socket I/O; Start
// refuses with an explanation when even CivetWeb's own needs do not fit.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/common/status.h"
#include "metrics/http_front.h"

struct mg_context;
struct mg_connection;

namespace dst::metrics {

struct HttpRequest {
  std::string_view method;  // "GET" or "HEAD"
  std::string_view path;    // percent-decoded, starts with '/', no dot segments
  std::string_view query;   // raw, without '?'; empty when absent
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string cache_control = "no-store";
};

// Called from a server worker thread; must be thread-safe. Exceptions are
// caught and answered with 500.
using HttpHandler = std::function<HttpResponse(const HttpRequest &request)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // an IPv4/IPv6 literal or "localhost"
  int port = 0;                    // 0 = any free port
  std::string token;               // empty = no authentication
  // CivetWeb gives each open connection a worker thread until it sends its
  // request or the request timeout passes: enough workers that a scraper and
  // a browser still get one while idle connections hold others, and a short
  // timeout that frees a worker an idle (or hostile) connection holds.
  int num_threads = 24;
  int request_timeout_ms = 1500;
  // The front (http_front.h) holds connections that are still sending their
  // request headers, without a worker: at most this long each, this many in
  // all and from one client address (the oldest is closed first).
  int header_timeout_ms = 10000;
  int max_pending = 512;
  int max_pending_per_client = 128;
  // Names the setting to change when the port is taken (for the message).
  std::string port_setting = "dstrain.monitor.http.port";
};

class HttpServer {
 public:
  // Starts listening. Errors name the address and the fix (port in use,
  // bad host, ...).
  static Result<std::unique_ptr<HttpServer>> Start(const HttpServerOptions &options,
                                                   HttpHandler handler);
  // Stops the server; returns after every worker thread has finished.
  ~HttpServer();
  HttpServer(const HttpServer &) = delete;
  HttpServer &operator=(const HttpServer &) = delete;

  int port() const { return port_; }
  // "127.0.0.1:9400" / "[::1]:9400" with the real port.
  const std::string &address() const { return address_; }

 private:
  HttpServer(HttpHandler handler, std::string token, std::string peer_secret)
      : handler_(std::move(handler)), token_(std::move(token)), peer_secret_(std::move(peer_secret)) {}
  struct Incoming;
  struct Answer;
  static int HandleRequest(mg_connection *conn, void *self);
  void Handle(mg_connection *conn);
  Answer Decide(const Incoming &in) const;

  // Failed token attempts per client address: after kMaxFailedTokens within
  // kFailureWindow a client gets 429 until the window passes, so a token
  // cannot be guessed at the speed of the network.
  static constexpr int kMaxFailedTokens = 20;
  static constexpr std::chrono::seconds kFailureWindow{60};
  struct Failures {
    int count = 0;
    std::chrono::steady_clock::time_point since;
  };
  // Seconds the client must still wait (0: it may try).
  int64_t BlockedFor(const std::string &client) const;
  void NoteFailedToken(const std::string &client) const;

  HttpHandler handler_;
  std::string token_;
  mutable std::mutex failures_mu_;
  mutable std::map<std::string, Failures> failures_;  // by client address
  std::string peer_secret_;  // the front's proof in kPeerHeader
  mg_context *ctx_ = nullptr;  // owned; mg_stop in the destructor
  int backend_port_ = 0;       // CivetWeb's, on loopback
  std::unique_ptr<HttpFront> front_;
  int port_ = 0;
  std::string address_;
};

// 32 random hex digits: what the front proves itself with to the server.
std::string NewPeerSecret();

// Ok when CivetWeb's threads get enough stack in this process to serve a
// request (Start checks it): they have a fixed 100 KiB stack in Debian's build,
// out of which glibc takes the process's static thread-local storage. The
// error names the libraries with large thread-local storage and the fix.
Status CheckHttpServerCanRun();

// Exposed for tests.
// True when `path` (percent-decoded) is a plain absolute path: starts with
// '/', no "." or ".." segment, no backslash, no control character.
bool IsSafeRequestPath(std::string_view path);
// True when the Authorization header value is "Bearer <token>" (scheme
// case-insensitive); compares the token in time independent of its content.
bool BearerTokenMatches(std::string_view authorization, std::string_view token);

}  // namespace dst::metrics
