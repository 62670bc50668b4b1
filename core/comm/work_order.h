// How the compute that follows a collective waits for it (issue 16's stream
// semantics). A layer hands each collective's Work to WorkOrder::After: the
// later kernels see the operation's result. On a device whose collectives
// complete on a stream (Work::CompletionEvent), the compute stream waits on
// that event and the host goes on queuing kernels; the Work is kept, with
// what it was for, until Drain — the end of the step, or any point where the
// host waits for the compute stream — reports its status (and its timeout:
// a dead peer is named, not a hung stream). A Work without an event (a host
// group's) is waited for at once. Without a WorkOrder the caller waits on
// the host, as on the CPU.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/common/status.h"

namespace dst {

class WorkOrder {
 public:
  // Queues a wait for `event` (a Work's completion event) on the compute stream.
  using WaitOnEvent = std::function<Status(void *event)>;
  explicit WorkOrder(WaitOnEvent wait_on) : wait_on_(std::move(wait_on)) {}
  ~WorkOrder();  // waits for the Works still kept
  WorkOrder(const WorkOrder &) = delete;
  WorkOrder &operator=(const WorkOrder &) = delete;

  // Later compute sees `work`'s result (null: nothing to wait for). An error
  // (context `what`) when it has already failed or its wait cannot be
  // queued — or an earlier kept Work's failure, found finished meanwhile
  // (reported once, here, so the caller stops before building on it).
  Status After(std::unique_ptr<Work> work, const std::string &what);
  // Waits for every kept Work; the first failure, including one found
  // earlier (each in its `what`).
  Status Drain();
  size_t kept() const { return kept_.size(); }

 private:
  struct Kept {
    std::unique_ptr<Work> work;
    std::string what;
  };
  // Drops the kept Works that have finished (Test does not block), keeping
  // the first failure among them.
  void Prune();
  void Note(Status st, const std::string &what);

  WaitOnEvent wait_on_;
  std::vector<Kept> kept_;
  Status failed_;
};

}  // namespace dst
