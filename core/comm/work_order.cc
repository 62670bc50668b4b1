#include "core/comm/work_order.h"

#include <utility>

namespace dst {

WorkOrder::~WorkOrder() {
  (void)Drain();
}

void WorkOrder::Note(Status st, const std::string &what) {
  if (!st.ok() && failed_.ok()) failed_ = st.context(what);
}

void WorkOrder::Prune() {
  size_t kept = 0;
  for (size_t i = 0; i < kept_.size(); ++i) {
    Kept &k = kept_[i];
    if (k.work->Test()) {
      Note(k.work->Wait(), k.what);  // finished: Wait returns its status at once
      continue;
    }
    if (kept != i) kept_[kept] = std::move(k);
    ++kept;
  }
  kept_.erase(kept_.begin() + std::ptrdiff_t(kept), kept_.end());
}

Status WorkOrder::After(std::unique_ptr<Work> work, const std::string &what) {
  if (!work) return Status::Ok();
  Prune();
  if (!failed_.ok()) {  // a kept one failed: say so now, before more is built on it
    kept_.push_back({std::move(work), what});
    return std::exchange(failed_, Status::Ok());
  }
  void *event = work->CompletionEvent();
  if (event == nullptr) {  // completes on the host: wait here
    Status st = work->Wait();
    return st.ok() ? st : st.context(what);
  }
  Status queued = wait_on_(event);
  if (!queued.ok()) {
    (void)work->Wait();
    return queued.context(what + ": the compute stream's wait for it");
  }
  kept_.push_back({std::move(work), what});
  return Status::Ok();
}

Status WorkOrder::Drain() {
  for (Kept &k : kept_) Note(k.work->Wait(), k.what);
  kept_.clear();
  Status first = std::move(failed_);
  failed_ = Status::Ok();
  return first;
}

}  // namespace dst
