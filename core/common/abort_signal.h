// A request to stop, raised from any thread (dst_engine_abort) and seen by
// every wait that may block on another rank: collectives and pipeline
// exchanges (their waits poll it every 100 ms), the rendezvous store's
// blocking reads (between their 250 ms slices), the heartbeat (which tells
// the other ranks), and the engine between micro-batches. Raising it is one
// atomic store: it allocates nothing and takes no lock.
#pragma once

#include <atomic>
#include <string>

#include "core/common/status.h"

namespace dst {

class AbortSignal {
 public:
  void Raise() noexcept { raised_.store(true, std::memory_order_release); }
  bool raised() const noexcept { return raised_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> raised_{false};
};

// The error a wait returns once the signal is raised; `doing` names the
// wait ("all-reduce of 4096 bytes on group 'dp'").
inline Status AbortedError(const std::string &doing) {
  return Status(Code::kAborted, doing +
                                    ": aborted (dst_engine_abort was called on this rank); "
                                    "the engine can only be destroyed now");
}

// True when `signal` (may be null) has been raised.
inline bool Raised(const AbortSignal *signal) {
  return signal != nullptr && signal->raised();
}

}  // namespace dst
