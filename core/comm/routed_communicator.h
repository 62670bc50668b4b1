// One group of a rank training on a device, over two communicators: the
// device's (NCCL on a GPU) for collectives over device memory — gradients,
// parameters, activations — and the host's (Gloo) for those over host memory
// — the gradient norm, the loss, counts, checkpoint pieces. Each operation
// goes where its buffer lives (`on_device`), so the engine's code keeps one
// Communicator per group whatever it reduces. Barriers run on the host
// group; OrderAfter (a compute stream) concerns the device group.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"

namespace dst {

class RoutedCommunicator final : public Communicator {
 public:
  using OnDevice = std::function<bool(const void *)>;
  // Both groups have the same members in the same order.
  RoutedCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<Communicator> device,
                     OnDevice on_device)
      : host_(std::move(host)), device_(std::move(device)), on_device_(std::move(on_device)) {}

  int64_t rank() const override { return host_->rank(); }
  int64_t size() const override { return host_->size(); }
  const std::string &name() const override { return host_->name(); }
  std::unique_ptr<Work> AllReduceSum(float *d, int64_t n) override {
    return For(d).AllReduceSum(d, n);
  }
  std::unique_ptr<Work> ReduceSum(float *d, int64_t n, int64_t root) override {
    return For(d).ReduceSum(d, n, root);
  }
  std::unique_ptr<Work> ReduceScatterSum(float *d, int64_t shard) override {
    return For(d).ReduceScatterSum(d, shard);
  }
  std::unique_ptr<Work> AllGather(float *d, int64_t shard) override {
    return For(d).AllGather(d, shard);
  }
  std::unique_ptr<Work> Broadcast(float *d, int64_t n, int64_t root) override {
    return For(d).Broadcast(d, n, root);
  }
  Status Barrier() override { return host_->Barrier(); }
  Status OrderAfter(void *stream) override { return device_->OrderAfter(stream); }
  std::unique_ptr<Work> Send(const void *d, int64_t bytes, int64_t peer, uint32_t tag) override {
    return For(d).Send(d, bytes, peer, tag);
  }
  std::unique_ptr<Work> Recv(void *d, int64_t bytes, int64_t peer, uint32_t tag) override {
    return For(d).Recv(d, bytes, peer, tag);
  }
  // Every operation's buffer on the same side (a pipeline's exchange is all
  // device or all host memory).
  std::unique_ptr<Work> Exchange(const std::vector<PeerOp> &ops) override {
    if (ops.empty()) return std::make_unique<DoneWork>();
    const bool device = on_device_(ops.front().data);
    for (const PeerOp &op : ops)
      if (on_device_(op.data) != device)
        return std::make_unique<DoneWork>(
            InternalError("an exchange on group '" + name() +
                          "' mixes device and host buffers: post each side's apart"));
    return (device ? *device_ : *host_).Exchange(ops);
  }
  std::unique_ptr<Work> AllReduceSum16(uint16_t *d, int64_t n, Half type) override {
    return For(d).AllReduceSum16(d, n, type);
  }
  std::unique_ptr<Work> ReduceSum16(uint16_t *d, int64_t n, int64_t root, Half type) override {
    return For(d).ReduceSum16(d, n, root, type);
  }
  std::unique_ptr<Work> AllGather16(uint16_t *d, int64_t shard) override {
    return For(d).AllGather16(d, shard);
  }
  std::unique_ptr<Work> Broadcast16(uint16_t *d, int64_t n, int64_t root) override {
    return For(d).Broadcast16(d, n, root);
  }
  void SetCompletionHook(CompletionHook hook) override {
    host_->SetCompletionHook(hook);
    device_->SetCompletionHook(hook);
  }

 private:
  Communicator &For(const void *data) { return on_device_(data) ? *device_ : *host_; }

  std::unique_ptr<Communicator> host_, device_;
  OnDevice on_device_;
};

}  // namespace dst
