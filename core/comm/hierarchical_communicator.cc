#include "core/comm/hierarchical_communicator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "core/comm/process_groups.h"

namespace dst {

NodeSplit SplitByNode(const std::vector<int64_t> &members, int64_t rank, int64_t local_world_size) {
  const int64_t per_node = std::max<int64_t>(1, local_world_size);
  auto node_of = [per_node](int64_t r) { return r / per_node; };
  NodeSplit split;
  std::vector<int64_t> nodes_seen;
  for (int64_t m : members) {
    if (node_of(m) == node_of(rank)) split.local.push_back(m);
    if (std::find(nodes_seen.begin(), nodes_seen.end(), node_of(m)) == nodes_seen.end()) {
      nodes_seen.push_back(node_of(m));
      split.leaders.push_back(m);
    }
  }
  split.is_leader = !split.local.empty() && split.local.front() == rank;
  return split;
}

namespace {

// A pending three-level sum.
class FutureWork final : public Work {
 public:
  explicit FutureWork(std::shared_future<Status> done) : done_(std::move(done)) {}
  Status Wait() override { return done_.get(); }
  bool Test() override {
    return done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

 private:
  std::shared_future<Status> done_;
};

// Sums in three levels; every other operation on the flat group.
class HierarchicalCommunicator final : public ForwardingCommunicator {
 public:
  HierarchicalCommunicator(std::unique_ptr<Communicator> flat, std::unique_ptr<Communicator> local,
                           std::unique_ptr<Communicator> leaders)
      : ForwardingCommunicator(std::move(flat)),
        local_(std::move(local)),
        leaders_(std::move(leaders)),
        worker_([this] { Run(); }) {}
  ~HierarchicalCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  std::unique_ptr<Work> AllReduceSum(float *data, int64_t count) override {
    return Sum(CommOp::kAllReduce, count * 4, [=, this] {
      return ThreeLevels([=, this] { return local_->ReduceSum(data, count, 0); },
                         [=, this] { return leaders_->AllReduceSum(data, count); },
                         [=, this] { return local_->Broadcast(data, count, 0); });
    });
  }
  // The sum lands on every rank, the root's included (the others' is scratch).
  std::unique_ptr<Work> ReduceSum(float *data, int64_t count, int64_t root) override {
    (void)root;
    return Sum(CommOp::kReduce, count * 4, [=, this] {
      return ThreeLevels([=, this] { return local_->ReduceSum(data, count, 0); },
                         [=, this] { return leaders_->AllReduceSum(data, count); },
                         [=, this] { return local_->Broadcast(data, count, 0); });
    });
  }
  std::unique_ptr<Work> AllReduceSum16(uint16_t *data, int64_t count, Half type) override {
    return Sum(CommOp::kAllReduce, count * 2, [=, this] {
      return ThreeLevels([=, this] { return local_->ReduceSum16(data, count, 0, type); },
                         [=, this] { return leaders_->AllReduceSum16(data, count, type); },
                         [=, this] { return local_->Broadcast16(data, count, 0); });
    });
  }
  std::unique_ptr<Work> ReduceSum16(uint16_t *data, int64_t count, int64_t root,
                                    Half type) override {
    (void)root;
    return Sum(CommOp::kReduce, count * 2, [=, this] {
      return ThreeLevels([=, this] { return local_->ReduceSum16(data, count, 0, type); },
                         [=, this] { return leaders_->AllReduceSum16(data, count, type); },
                         [=, this] { return local_->Broadcast16(data, count, 0); });
    });
  }

  void SetCompletionHook(CompletionHook hook) override {
    ForwardingCommunicator::SetCompletionHook(hook);
    std::lock_guard<std::mutex> lock(mu_);
    hook_ = std::move(hook);
  }

 private:
  using Level = std::function<std::unique_ptr<Work>()>;

  // Reduce within the node, all-reduce among the leaders, broadcast back.
  Status ThreeLevels(const Level &reduce, const Level &across, const Level &broadcast) {
    DST_RETURN_IF_ERROR(reduce()->Wait());
    if (leaders_) DST_RETURN_IF_ERROR(across()->Wait());
    return broadcast()->Wait();
  }

  std::unique_ptr<Work> Sum(CommOp op, int64_t bytes, std::function<Status()> body) {
    auto task = std::make_shared<std::packaged_task<Status()>>([this, op, bytes, body] {
      const auto start = std::chrono::steady_clock::now();
      Status st = body();
      CompletionHook hook;
      {
        std::lock_guard<std::mutex> lock(mu_);
        hook = hook_;
      }
      if (st.ok() && hook)
        hook(CommRecord{
            op, bytes,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
      return st;
    });
    std::shared_future<Status> done = task->get_future().share();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return std::make_unique<FutureWork>(std::move(done));
  }

  void Run() {
    while (true) {
      std::function<void()> next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      next();
    }
  }

  std::unique_ptr<Communicator> local_, leaders_;  // leaders_: null off the leaders
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  CompletionHook hook_;
  bool stop_ = false;
  std::thread worker_;  // last: starts once the rest exists
};

}  // namespace

Result<std::unique_ptr<Communicator>> MakeHierarchical(
    std::unique_ptr<Communicator> flat, Store *store, int64_t rank, const std::string &name,
    const std::vector<int64_t> &members, int64_t local_world_size, const GlooOptions &common) {
  const NodeSplit split = SplitByNode(members, rank, local_world_size);
  if (split.leaders.size() <= 1 || split.leaders.size() == members.size()) return flat;
  Result<std::unique_ptr<Communicator>> local =
      ConnectGroup(store, rank, name + "_local", split.local, common);
  if (!local.ok()) return local.status();
  std::unique_ptr<Communicator> leaders;
  if (split.is_leader) {
    Result<std::unique_ptr<Communicator>> connected =
        ConnectGroup(store, rank, name + "_leaders", split.leaders, common);
    if (!connected.ok()) return connected.status();
    leaders = std::move(connected).value();
  }
  return std::unique_ptr<Communicator>(
      new HierarchicalCommunicator(std::move(flat), std::move(local).value(), std::move(leaders)));
}

}  // namespace dst
