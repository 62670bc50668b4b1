// The rendezvous key-value store: how ranks find each other before any
// collective exists. Rank 0 hosts a TCP server (MASTER_ADDR:MASTER_PORT);
// every rank, rank 0 included, talks to it as a client. Backends exchange
// their addresses through it (the Gloo backend adapts it to
// gloo::rendezvous::Store; NCCL will pass its unique id through it), and the
// engine compares config hashes through it at start-up.
//
// Every call is bounded by a timeout and returns a Status: a missing peer, a
// stray process or a dead rank 0 becomes a kComm error naming the key, the
// address and the likely cause, never a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/common/abort_signal.h"
#include "core/common/status.h"

namespace dst {

// Thread-safe: calls on one Store are serialised (a blocking Get holds the
// connection, so other threads' calls wait behind it).
class Store {
 public:
  virtual ~Store() = default;
  virtual Status Set(const std::string &key, const std::vector<uint8_t> &value) = 0;
  // Blocks until the key exists; kComm error naming the key, the timeout and
  // the likely cause when it expires.
  virtual Result<std::vector<uint8_t>> Get(const std::string &key,
                                           std::chrono::milliseconds timeout) = 0;
  // Blocks until every key exists; the error names the keys still missing.
  virtual Status Wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) = 0;
  // Atomic counter (the value is stored as decimal text, so Get returns
  // "3"); a missing key counts from 0. Returns the new value.
  virtual Result<int64_t> Add(const std::string &key, int64_t delta) = 0;
  // Set within `timeout` (not the store's), even after the abort signal was
  // raised: an aborted rank's last words (its heartbeat says "aborted").
  virtual Status SetWithin(const std::string &key, const std::vector<uint8_t> &value,
                           std::chrono::milliseconds timeout) {
    (void)timeout;
    return Set(key, value);
  }
  // Drops the connection now, without saying this rank finished: later calls
  // fail at once and the server counts the rank as lost. For an engine torn
  // down after a failure (dst_engine_abort), which must wait for no one.
  virtual void Abort() = 0;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // MASTER_ADDR (IPv4, IPv6 or a host name)
  int port = 29500;                // MASTER_PORT; 0 on the server = any free port
  bool is_server = false;          // rank 0 hosts it
  int64_t rank = 0, world_size = 1;
  std::string job_token;                      // DSTRAIN_JOB_TOKEN; must match the server's
  std::chrono::milliseconds timeout{300000};  // connect + every op
  // Raised by dst_engine_abort: a blocking Get or Wait returns kAborted
  // after its current 250 ms slice, and a call on a server that stopped
  // answering gives up 400 ms after the signal (null: never raised).
  std::shared_ptr<const AbortSignal> abort;
};

// Rank 0 starts the server (a background thread owned by the returned object)
// and connects to it; others connect with retries until the timeout. The
// handshake checks the job token, the world size and that no other process
// holds the same rank. The server listens on every interface (like torchrun's
// TCPStore) so that MASTER_ADDR may be any of the host's addresses; the job
// token is what keeps other jobs out. Destroying rank 0's store stops the
// server, and the other ranks' pending calls fail at once.
Result<std::unique_ptr<Store>> ConnectTcpStore(const TcpStoreOptions &options);

// Keys the store maintains itself. A rank that closes its store connection
// after setting kFinishedKey + rank (the TcpStore destructor does) finished;
// one that vanishes without it is appended to kLostKey ("1,3": in order of
// departure). Either way kDoneKey + rank is set.
inline constexpr const char *kFinishedKey = "__dstrain/finished/";
inline constexpr const char *kDoneKey = "__dstrain/done/";
inline constexpr const char *kLostKey = "__dstrain/lost";

// Which rank died, for error messages after a failed collective: waits up to
// `wait` for the store to report a lost rank. Returns e.g. "rank 1 died first
// (its connection to the rendezvous store closed before it finished)", a note
// that rank 0 (the store's host) is unreachable, or "" when nobody is known
// to be lost (a stalled rank, or a network failure).
std::string DescribeLostRanks(Store &store, std::chrono::milliseconds wait);

// At the end of a job. Rank 0 waits (up to `wait`) until every other rank has
// finished or been lost, so that its store server outlives their last calls.
// The other ranks say they finished and wait (up to `wait`) until rank 0's
// server has closed: an engine the process creates next then cannot join the
// old job's server while it shuts down.
void FinishJob(Store &store, int64_t rank, int64_t world_size, std::chrono::milliseconds wait);

// Every rank publishes a hash of its resolved config and compares it with
// rank 0's; a mismatch is a kConfig error naming the ranks (rank 0 names every
// differing rank, the others say where their text first differs from rank
// 0's) and telling the user to start all ranks with the same ds_config.
Status CheckSameConfig(Store &store, int64_t rank, int64_t world_size,
                       const std::string &config_text, std::chrono::milliseconds timeout);

}  // namespace dst
