#include "core/comm/gloo_communicator.h"

#include "core/comm/heartbeat.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dst {

namespace {

using Clock = std::chrono::steady_clock;

// Presents our Store to Gloo, which expects exceptions on failure.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(dst::Store &store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}
  void set(const std::string &key, const std::vector<char> &data) override {
    Throw(store_.Set(key, std::vector<uint8_t>(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string &key) override {
    Result<std::vector<uint8_t>> value = store_.Get(key, timeout_);
    Throw(value.status());
    return std::vector<char>(value.value().begin(), value.value().end());
  }
  void wait(const std::vector<std::string> &keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &t) override {
    Throw(store_.Wait(keys, t));
  }

 private:
  static void Throw(const Status &st) {
    if (!st.ok()) throw gloo::IoException(st.message());
  }
  dst::Store &store_;
  std::chrono::milliseconds timeout_;
};

// Gloo reduction functions over 16-bit bit patterns (Gloo has fp16 but no
// bf16 type; both go through our conversions, rounding after each addition).
void SumFp16(uint16_t *x, const uint16_t *y, size_t n) {
  Sum16(Half::kFp16, x, y, int64_t(n));
}
void SumBf16(uint16_t *x, const uint16_t *y, size_t n) {
  Sum16(Half::kBf16, x, y, int64_t(n));
}
const gloo::ReductionFunction<uint16_t> *SumFunction16(Half type) {
  static const gloo::ReductionFunction<uint16_t> fp16(gloo::SUM, &SumFp16);
  static const gloo::ReductionFunction<uint16_t> bf16(gloo::SUM, &SumBf16);
  return type == Half::kFp16 ? &fp16 : &bf16;
}

// One queued collective and the state its Work handle waits on.
struct Task {
  std::function<void()> run;  // may throw gloo exceptions
  CommOp op;
  int64_t bytes;
  Clock::time_point enqueued;
  Clock::time_point started;  // when the worker began it
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
};

// Whoever runs tasks and can tell, while one waits, that a peer stalled.
class StallChecker {
 public:
  virtual ~StallChecker() = default;
  // Called every ~100 ms while a caller waits for a task the worker runs;
  // returns why the wait must end now (ok to go on waiting).
  virtual Status WhileWaiting(CommOp op, int64_t bytes) = 0;
  // Whether this rank was aborted: an operation that failed after it (its
  // connections were closed under it) reports the abort, not the failure.
  virtual bool AbortRaised() const = 0;
};

class TaskWork final : public Work {
 public:
  TaskWork(std::shared_ptr<Task> task, StallChecker *checker)
      : task_(std::move(task)), checker_(checker) {}
  ~TaskWork() override { (void)Wait(); }
  Status Wait() override {
    std::unique_lock<std::mutex> lock(task_->mu);
    while (!task_->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return task_->done; })) {
      if (!checker_) continue;
      lock.unlock();
      Status stalled = checker_->WhileWaiting(task_->op, task_->bytes);
      lock.lock();
      // A stalled peer or an abort: the wait ends now; the worker stays in
      // Gloo's read until its own timeout (or the abort closes the group's
      // connections) and then finds the communicator broken.
      if (!stalled.ok() && !task_->done) return stalled;
    }
    if (!task_->status.ok() && checker_ && checker_->AbortRaised())
      return AbortedError(std::string(CommOpName(task_->op)) + " of " +
                          std::to_string(task_->bytes) + " bytes");
    return task_->status;
  }
  bool Test() override {
    std::lock_guard<std::mutex> lock(task_->mu);
    return task_->done;
  }

 private:
  std::shared_ptr<Task> task_;
  StallChecker *checker_;
};

// p2p slots live apart from the collectives' (Gloo's algorithms take theirs
// from the context's counter, from 0 up).
constexpr uint64_t kP2pSlotBase = uint64_t(0xd5) << 56;

// A send or receive posted on an unbound buffer. Gloo's transport moves the
// bytes on its own threads, so it runs beside the collectives of the worker
// thread; a waiter thread (P2pWaiters) blocks in Gloo's wait, because Gloo
// has no non-blocking test (a wait that times out, even a zero one, breaks
// every pair of the context).
struct P2pState {
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  bool send = false;
  CommRecord record{CommOp::kSend, 0, 0.0};
  std::function<std::string(const std::string &cause)> describe;
  Communicator::CompletionHook hook;
  Clock::time_point started;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
};

class P2pWork final : public Work {
 public:
  P2pWork(std::shared_ptr<P2pState> state, StallChecker *checker)
      : state_(std::move(state)), checker_(checker) {}
  ~P2pWork() override { (void)Wait(); }
  // Like TaskWork::Wait: a peer that stopped beating ends the wait with its
  // name (a waiter thread stays in Gloo's wait until the group's timeout).
  Status Wait() override {
    std::unique_lock<std::mutex> lock(state_->mu);
    while (
        !state_->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return state_->done; })) {
      if (!checker_) continue;
      lock.unlock();
      Status stalled = checker_->WhileWaiting(state_->record.op, state_->record.bytes);
      lock.lock();
      if (!stalled.ok() && !state_->done) return stalled;
    }
    if (!state_->status.ok() && checker_ && checker_->AbortRaised())
      return AbortedError(std::string(CommOpName(state_->record.op)) + " of " +
                          std::to_string(state_->record.bytes) + " bytes");
    return state_->status;
  }
  bool Test() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->done;
  }

 private:
  std::shared_ptr<P2pState> state_;
  StallChecker *checker_;
};

// Threads that wait for posted sends and receives, one operation each at a
// time; a new thread starts only when every existing one is busy, so a
// steady pipeline reuses the same few.
class P2pWaiters {
 public:
  explicit P2pWaiters(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  // Waits still running (a stalled or dead peer's: the communicator is
  // going away after an error) are aborted rather than left to the timeout.
  ~P2pWaiters() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      closing_ = true;
      for (const std::shared_ptr<P2pState> &p : queue_) Abort(*p);
      for (const std::shared_ptr<P2pState> &p : active_) Abort(*p);
    }
    cv_.notify_all();
    for (std::thread &t : threads_) t.join();
  }

  void Post(std::shared_ptr<P2pState> state) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(state));
      if (idle_ == 0)
        threads_.emplace_back([this] { Run(); });
      else
        --idle_;
    }
    cv_.notify_one();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::shared_ptr<P2pState> state = std::move(queue_.front());
      queue_.pop_front();
      active_.push_back(state);
      lock.unlock();
      Complete(*state);
      lock.lock();
      active_.erase(std::find(active_.begin(), active_.end(), state));
      ++idle_;
    }
  }

  static void Abort(P2pState &p) {
    if (p.send)
      p.buffer->abortWaitSend();
    else
      p.buffer->abortWaitRecv();
  }

  void Complete(P2pState &p) {
    Status status;
    try {
      const bool finished = p.send ? p.buffer->waitSend(timeout_) : p.buffer->waitRecv(timeout_);
      // Aborted by the closing communicator: nobody reads the reason, and
      // asking the store for lost ranks would hold the close up for seconds.
      if (!finished)
        status = Status(Code::kComm, closing_ ? std::string("aborted: the group is closing")
                                              : p.describe("aborted"));
    } catch (const std::exception &e) {
      status = Status(Code::kComm, p.describe(e.what()));
    }
    p.record.seconds = std::chrono::duration<double>(Clock::now() - p.started).count();
    if (status.ok() && p.hook) p.hook(p.record);
    std::lock_guard<std::mutex> lock(p.mu);
    p.status = std::move(status);
    p.done = true;
    p.cv.notify_all();
  }

  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<P2pState>> queue_;
  std::vector<std::shared_ptr<P2pState>> active_;  // being waited for
  std::atomic<bool> closing_{false};               // the destructor aborts the waits
  std::vector<std::thread> threads_;
  int idle_ = 0;  // threads waiting for work
  bool stopping_ = false;
};

// The communicator's state, shared by the handle (GlooCommunicator) and its
// worker thread, so that a worker stuck in Gloo's read on a stalled peer can
// be left behind (detached) while the handle goes away: it finishes that read
// at Gloo's timeout, finds the communicator broken and exits.
class GlooGroup final : public Communicator, public StallChecker {
 public:
  // `store` must outlive the communicator: after a failure it names the lost rank.
  GlooGroup(const GlooOptions &options, std::shared_ptr<gloo::Context> context, Store *store)
      : options_(options), context_(std::move(context)), store_(store), waiters_(options.timeout) {
    std::vector<int64_t> peers;
    for (int64_t r = 0; r < int64_t(options.global_ranks.size()); ++r)
      if (r != options.rank) peers.push_back(options.global_ranks[size_t(r)]);
    if (!peers.empty())
      watch_ = std::make_unique<StallWatch>(
          store, std::move(peers), std::max(std::chrono::milliseconds(1500), options.timeout / 2));
  }

  // An abort on this rank ends the wait; so does a peer that stopped
  // beating or aborted, with its name. The communicator is broken from then
  // on (later operations fail at once).
  Status WhileWaiting(CommOp op, int64_t bytes) override {
    const std::string what = std::string(CommOpName(op)) + " of " + std::to_string(bytes) +
                             " bytes on group '" + options_.name + "' (rank " +
                             std::to_string(rank()) + " of " + std::to_string(size()) + ")";
    if (Aborted()) return AbortedError(what);
    std::lock_guard<std::mutex> lock(watch_mu_);
    if (!watch_) return Status::Ok();
    if (stall_.empty()) {
      std::string stalled = watch_->Check();
      if (stalled.empty()) return Status::Ok();
      std::lock_guard<std::mutex> reason(mu_);
      stall_ = std::move(stalled);
    }
    return Status(Code::kComm, what + " failed: " + stall_ + "; every rank stops");
  }

  bool Aborted() const { return Raised(options_.abort.get()); }
  bool AbortRaised() const override { return Aborted(); }

  // After an abort: drops the connections to every peer, so that a worker
  // or a p2p waiter blocked in Gloo on a peer that will never answer fails
  // now instead of at the group's timeout.
  void CloseConnections() {
    try {
      context_->closeConnections();
    } catch (const std::exception &) {  // already closed or broken: nothing left to drop
    }
  }

  // Whether the worker finished its last task within `timeout` (it is not
  // inside Gloo any more and can be joined).
  bool WorkerLeftGloo(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return !running_; });
  }

  // Ends the worker's loop once its queue is empty.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
  }
  // Whether the worker may still be inside Gloo on a stalled peer.
  bool Stalled() {
    std::lock_guard<std::mutex> lock(mu_);
    return !stall_.empty();
  }

  void RunWorker() {
    for (;;) {
      std::shared_ptr<Task> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = queue_.front();
        queue_.pop_front();
        running_ = true;
      }
      task->started = Clock::now();
      Status status = Execute(*task);
      {
        std::lock_guard<std::mutex> lock(mu_);
        running_ = false;
      }
      cv_.notify_all();
      Finish(*task, std::move(status));
    }
  }

  int64_t rank() const override { return options_.rank; }
  int64_t size() const override { return options_.size; }
  const std::string &name() const override { return options_.name; }
  void SetCompletionHook(CompletionHook hook) override {
    std::lock_guard<std::mutex> lock(mu_);
    hook_ = std::move(hook);
  }

  // Gloo's options-style allreduce (ring and bcube alike) stalls for tens of
  // milliseconds on 16-256 KB messages over TCP here, while its halving-doubling
  // algorithm runs them in about a millisecond (bench/bench_comm.cc), so the
  // allreduce uses the latter.
  std::unique_ptr<Work> AllReduceSum(float *data, int64_t count) override {
    return HalvingDoublingSum(CommOp::kAllReduce, data, count, gloo::ReductionFunction<float>::sum);
  }

  // Reduce to `root`, run as a halving-doubling allreduce: Gloo's own reduce
  // stalls on TCP here (see AllReduceSum), and the allreduce leaves the sum on
  // the root as required (the other ranks' copies are scratch by contract).
  // It moves twice the bytes of an ideal reduce, and is still far faster.
  std::unique_ptr<Work> ReduceSum(float *data, int64_t count, int64_t root) override {
    (void)root;
    return HalvingDoublingSum(CommOp::kReduce, data, count, gloo::ReductionFunction<float>::sum);
  }

  std::unique_ptr<Work> ReduceScatterSum(float *data, int64_t shard) override {
    return Enqueue(CommOp::kReduceScatter, shard * size() * 4, [this, data, shard](uint32_t) {
      std::vector<int> counts(static_cast<size_t>(size()), static_cast<int>(shard));
      std::vector<float *> ptrs = {data};
      gloo::ReduceScatterHalvingDoubling<float> algorithm(context_, ptrs, int(shard * size()),
                                                          counts);
      algorithm.run();
      // Gloo leaves each rank's reduced shard at the start of the buffer;
      // our contract (and NCCL's in-place form) has it at rank * shard.
      if (rank() != 0) std::memmove(data + rank() * shard, data, size_t(shard) * sizeof(float));
    });
  }

  std::unique_ptr<Work> AllGather(float *data, int64_t shard) override {
    return GatherShards(data, shard);
  }

  std::unique_ptr<Work> Broadcast(float *data, int64_t count, int64_t root) override {
    return BroadcastFrom(data, count, root);
  }

  // 16 bits: the same algorithms over bit patterns, summed by SumFunction16.
  std::unique_ptr<Work> AllReduceSum16(uint16_t *data, int64_t count, Half type) override {
    return HalvingDoublingSum(CommOp::kAllReduce, data, count, SumFunction16(type));
  }

  std::unique_ptr<Work> ReduceSum16(uint16_t *data, int64_t count, int64_t root,
                                    Half type) override {
    (void)root;  // as ReduceSum
    return HalvingDoublingSum(CommOp::kReduce, data, count, SumFunction16(type));
  }

  std::unique_ptr<Work> AllGather16(uint16_t *data, int64_t shard) override {
    return GatherShards(data, shard);
  }

  std::unique_ptr<Work> Broadcast16(uint16_t *data, int64_t count, int64_t root) override {
    return BroadcastFrom(data, count, root);
  }

  std::unique_ptr<Work> Send(const void *data, int64_t bytes, int64_t peer, uint32_t tag) override {
    return PostP2p(const_cast<void *>(data), bytes, peer, tag, /*send=*/true);
  }

  std::unique_ptr<Work> Recv(void *data, int64_t bytes, int64_t peer, uint32_t tag) override {
    return PostP2p(data, bytes, peer, tag, /*send=*/false);
  }

  Status Barrier() override {
    return Enqueue(CommOp::kBarrier, 0,
                   [this](uint32_t tag) {
                     gloo::BarrierOptions opts(context_);
                     opts.setTag(tag);
                     opts.setTimeout(options_.timeout);
                     gloo::barrier(opts);
                   })
        ->Wait();
  }

 private:
  std::unique_ptr<Work> PostP2p(void *data, int64_t bytes, int64_t peer, uint32_t tag, bool send) {
    const CommOp op = send ? CommOp::kSend : CommOp::kRecv;
    const std::string what = std::string(CommOpName(op)) + " of " + std::to_string(bytes) +
                             " bytes " + (send ? "to" : "from") + " rank " + std::to_string(peer) +
                             " (tag " + std::to_string(tag) + ") on group '" + options_.name +
                             "' (rank " + std::to_string(rank()) + " of " + std::to_string(size()) +
                             ")";
    if (peer < 0 || peer >= size() || peer == rank() || bytes < 0)
      return std::make_unique<DoneWork>(
          InvalidArgument(what + ": the peer must be another rank of the group"));
    Store *store = store_;
    const int64_t global_peer =
        options_.global_ranks.empty() ? -1 : options_.global_ranks[size_t(peer)];
    auto describe = [what, store, global_peer](const std::string &cause) {
      std::string lost = global_peer < 0 ? "" : DescribeAbortedRank(*store, global_peer);
      if (lost.empty()) lost = DescribeLostRanks(*store, std::chrono::seconds(3));
      return what + " failed: " + cause + ". " +
             (lost.empty() ? "The peer rank has died or stalled" : lost) +
             "; every rank stops within dstrain.comm_timeout_seconds";
    };
    CompletionHook hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hook = hook_;
    }
    try {
      auto state = std::make_shared<P2pState>();
      state->buffer = context_->createUnboundBuffer(data, size_t(bytes));
      state->send = send;
      state->record = CommRecord{op, bytes, 0.0};
      state->describe = describe;
      state->hook = hook;
      state->started = Clock::now();
      if (send)
        state->buffer->send(int(peer), kP2pSlotBase | tag);
      else
        state->buffer->recv(int(peer), kP2pSlotBase | tag);
      waiters_.Post(state);
      return std::make_unique<P2pWork>(std::move(state), this);
    } catch (const std::exception &e) {
      return std::make_unique<DoneWork>(Status(Code::kComm, describe(e.what())));
    }
  }

  template <typename T>
  std::unique_ptr<Work> HalvingDoublingSum(CommOp op, T *data, int64_t count,
                                           const gloo::ReductionFunction<T> *sum) {
    return Enqueue(op, count * int64_t(sizeof(T)), [this, data, count, sum](uint32_t) {
      std::vector<T *> ptrs = {data};
      if (options_.ring_sums) {  // communication.topology "ring"
        gloo::AllreduceRing<T> algorithm(context_, ptrs, int(count), sum);
        algorithm.run();
        return;
      }
      gloo::AllreduceHalvingDoubling<T> algorithm(context_, ptrs, int(count), sum);
      algorithm.run();
    });
  }

  template <typename T>
  std::unique_ptr<Work> GatherShards(T *data, int64_t shard) {
    return Enqueue(CommOp::kAllGather, shard * size() * int64_t(sizeof(T)),
                   [this, data, shard](uint32_t tag) {
                     gloo::AllgatherOptions opts(context_);
                     opts.setOutput(data, size_t(shard * size()));
                     opts.setTag(tag);
                     opts.setTimeout(options_.timeout);
                     gloo::allgather(opts);
                   });
  }

  // Gloo's algorithm class (not its options-style call, which stalls on TCP
  // here after a reduce) for the same reason as AllReduceSum.
  template <typename T>
  std::unique_ptr<Work> BroadcastFrom(T *data, int64_t count, int64_t root) {
    return Enqueue(CommOp::kBroadcast, count * int64_t(sizeof(T)),
                   [this, data, count, root](uint32_t) {
                     std::vector<T *> ptrs = {data};
                     gloo::BroadcastOneToAll<T> algorithm(context_, ptrs, int(count), int(root));
                     algorithm.run();
                   });
  }

  std::unique_ptr<Work> Enqueue(CommOp op, int64_t bytes, std::function<void(uint32_t)> body) {
    auto task = std::make_shared<Task>();
    task->op = op;
    task->bytes = bytes;
    task->enqueued = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      const uint32_t tag = next_tag_++;
      task->run = [body = std::move(body), tag] { body(tag); };
      queue_.push_back(task);
    }
    cv_.notify_all();
    return std::make_unique<TaskWork>(task, this);
  }

  // Runs one collective; after a failure every later one fails at once with
  // the first error, so no rank waits on a mesh that is already broken.
  Status Execute(Task &task) {
    if (!broken_.ok()) return broken_;
    if (Aborted()) return broken_ = AbortedError("group '" + options_.name + "'");
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stall_.empty())
        broken_ = Status(Code::kComm, "group '" + options_.name + "': " + stall_);
    }
    if (!broken_.ok()) return broken_;
    try {
      task.run();
      return Status::Ok();
    } catch (const std::exception &e) {
      if (Aborted()) return broken_ = AbortedError("group '" + options_.name + "'");
      std::string stalled;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stalled = stall_;
      }
      if (!stalled.empty()) {
        broken_ = Status(Code::kComm, std::string(CommOpName(task.op)) + " of " +
                                          std::to_string(task.bytes) + " bytes on group '" +
                                          options_.name + "' (rank " + std::to_string(rank()) +
                                          " of " + std::to_string(size()) + ") failed: " + stalled +
                                          "; every rank stops");
        return broken_;
      }
      std::string lost;
      if (watch_) {
        std::lock_guard<std::mutex> watching(watch_mu_);
        lost = watch_->Aborted();
      }
      if (lost.empty()) lost = DescribeLostRanks(*store_, std::chrono::seconds(1));
      if (lost.empty() && watch_) {
        std::lock_guard<std::mutex> watching(watch_mu_);
        lost = watch_->Behind(options_.global_ranks[size_t(options_.rank)]);
      }
      broken_ =
          Status(Code::kComm, std::string(CommOpName(task.op)) + " of " +
                                  std::to_string(task.bytes) + " bytes on group '" + options_.name +
                                  "' (rank " + std::to_string(rank()) + " of " +
                                  std::to_string(size()) + ") failed: " + e.what() + ". " +
                                  (lost.empty() ? "A peer rank has died or stalled" : lost) +
                                  "; every rank stops within dstrain.comm_timeout_seconds");
      return broken_;
    }
  }

  void Finish(Task &task, Status status) {
    // The collective's own time (not its wait in the queue): what "hidden
    // behind backward" is measured against.
    const double seconds = std::chrono::duration<double>(Clock::now() - task.started).count();
    if (status.ok()) {
      CompletionHook hook;
      {
        std::lock_guard<std::mutex> lock(mu_);
        hook = hook_;
      }
      if (hook) hook(CommRecord{task.op, task.bytes, seconds});
    }
    std::lock_guard<std::mutex> lock(task.mu);
    task.status = std::move(status);
    task.done = true;
    task.cv.notify_all();
  }

  GlooOptions options_;
  std::shared_ptr<gloo::Context> context_;
  Store *store_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool stopping_ = false;
  bool running_ = false;  // the worker is inside a task (under mu_)
  uint32_t next_tag_ = 1;
  CompletionHook hook_;
  Status broken_;  // touched only by the worker thread
  std::mutex watch_mu_;
  std::unique_ptr<StallWatch> watch_;  // null without global_ranks
  std::string stall_;                  // set once a peer stalled (under mu_)
  P2pWaiters waiters_;                 // sends and receives in flight
};

// The handle: starts the worker on the shared group and, when it goes, stops
// it — waiting for it, unless a peer stalled and the worker may be stuck in
// Gloo until its timeout, when the worker is left to finish on its own.
class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<GlooGroup> group)
      : group_(std::move(group)), worker_([g = group_] { g->RunWorker(); }) {}
  ~GlooCommunicator() override {
    group_->Stop();
    if (group_->Aborted()) {
      group_->CloseConnections();
      if (!group_->WorkerLeftGloo(std::chrono::milliseconds(1000))) {
        worker_.detach();
        return;
      }
    }
    if (group_->Stalled())
      worker_.detach();
    else
      worker_.join();
  }
  int64_t rank() const override { return group_->rank(); }
  int64_t size() const override { return group_->size(); }
  const std::string &name() const override { return group_->name(); }
  std::unique_ptr<Work> AllReduceSum(float *d, int64_t n) override {
    return group_->AllReduceSum(d, n);
  }
  std::unique_ptr<Work> ReduceSum(float *d, int64_t n, int64_t root) override {
    return group_->ReduceSum(d, n, root);
  }
  std::unique_ptr<Work> ReduceScatterSum(float *d, int64_t shard) override {
    return group_->ReduceScatterSum(d, shard);
  }
  std::unique_ptr<Work> AllGather(float *d, int64_t shard) override {
    return group_->AllGather(d, shard);
  }
  std::unique_ptr<Work> Broadcast(float *d, int64_t n, int64_t root) override {
    return group_->Broadcast(d, n, root);
  }
  Status Barrier() override { return group_->Barrier(); }
  std::unique_ptr<Work> AllReduceSum16(uint16_t *d, int64_t n, Half type) override {
    return group_->AllReduceSum16(d, n, type);
  }
  std::unique_ptr<Work> ReduceSum16(uint16_t *d, int64_t n, int64_t root, Half type) override {
    return group_->ReduceSum16(d, n, root, type);
  }
  std::unique_ptr<Work> AllGather16(uint16_t *d, int64_t shard) override {
    return group_->AllGather16(d, shard);
  }
  std::unique_ptr<Work> Broadcast16(uint16_t *d, int64_t n, int64_t root) override {
    return group_->Broadcast16(d, n, root);
  }
  std::unique_ptr<Work> Send(const void *d, int64_t bytes, int64_t peer, uint32_t tag) override {
    return group_->Send(d, bytes, peer, tag);
  }
  std::unique_ptr<Work> Recv(void *d, int64_t bytes, int64_t peer, uint32_t tag) override {
    return group_->Recv(d, bytes, peer, tag);
  }
  void SetCompletionHook(CompletionHook hook) override {
    group_->SetCompletionHook(std::move(hook));
  }

 private:
  std::shared_ptr<GlooGroup> group_;
  std::thread worker_;
};

}  // namespace

std::string DetectBindHost(const std::string &master_addr) {
  if (master_addr.empty() || master_addr == "localhost" || master_addr.rfind("127.", 0) == 0)
    return "127.0.0.1";
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(master_addr.c_str(), "9", &hints, &res) != 0 || !res) return master_addr;
  std::string local = master_addr;
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in addr{};
    socklen_t len = sizeof addr;
    char text[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0 &&
        ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text))
      local = text;
  }
  if (fd >= 0) ::close(fd);
  freeaddrinfo(res);
  return local;
}

namespace {
// Gloo writes to peer sockets with plain write(): a peer that has died would
// kill this process with SIGPIPE before any error could be reported. Unless
// the program chose a handler, ignore it so the write fails with EPIPE and
// becomes a named communication error.
void IgnoreSigpipeUnlessHandled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
}
}  // namespace

Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(Store &store,
                                                             const GlooOptions &options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
    return InvalidArgument("gloo group '" + options.name + "': rank " +
                           std::to_string(options.rank) + " is outside [0, " +
                           std::to_string(options.size) + ")");
  if (options.size == 1) return MakeSoloCommunicator(options.name);
  IgnoreSigpipeUnlessHandled();
  const std::string host =
      options.bind_host.empty() ? DetectBindHost(options.master_addr) : options.bind_host;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context =
        std::make_shared<gloo::rendezvous::Context>(int(options.rank), int(options.size));
    context->setTimeout(options.timeout);
    GlooStoreAdapter adapter(store, options.timeout);
    gloo::rendezvous::PrefixStore prefixed(
        "gloo/" + (options.store_prefix.empty() ? options.name : options.store_prefix), adapter);
    context->connectFullMesh(prefixed, device);
    return std::unique_ptr<Communicator>(
        new GlooCommunicator(std::make_shared<GlooGroup>(options, std::move(context), &store)));
  } catch (const std::exception &e) {
    return Status(Code::kComm, "connecting group '" + options.name + "' (rank " +
                                   std::to_string(options.rank) + " of " +
                                   std::to_string(options.size) + ", listening on " + host +
                                   ") failed: " + e.what() +
                                   ". Check that every rank was started and can reach " + host +
                                   "; set DSTRAIN_BIND_ADDR to choose the interface");
  }
}

}  // namespace dst
