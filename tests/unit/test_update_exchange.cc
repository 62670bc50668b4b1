// UpdateExchange (gradient_compression target "update") over a scripted
// two-rank group whose all-gather either copies a fixed peer payload in or
// fails: the mean of the ranks' decoded changes is applied to the start
// weights, and a failed exchange loses nothing of them.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/zero/update_exchange.h"

namespace dst {
namespace {

// Rank 0 of two. The peer's payload is the encoding of `peer_delta`
// (top-k of every entry: its values then indices), or the gather fails.
class ScriptedPair final : public Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 2; }
  const std::string &name() const override { return name_; }
  std::unique_ptr<Work> AllGather(float *data, int64_t shard) override {
    if (fail) return Fails();
    // Rank 1's block: its payload, the same codec over its own change.
    std::memcpy(data + shard, peer_payload.data(), size_t(shard) * 4);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> AllReduceSum(float *, int64_t) override { return Fails(); }
  std::unique_ptr<Work> ReduceSum(float *, int64_t, int64_t) override { return Fails(); }
  std::unique_ptr<Work> ReduceScatterSum(float *, int64_t) override { return Fails(); }
  std::unique_ptr<Work> Broadcast(float *, int64_t, int64_t) override { return Fails(); }
  Status Barrier() override { return Status::Ok(); }
  std::unique_ptr<Work> Send(const void *, int64_t, int64_t, uint32_t) override { return Fails(); }
  std::unique_ptr<Work> Recv(void *, int64_t, int64_t, uint32_t) override { return Fails(); }
  std::unique_ptr<Work> AllReduceSum16(uint16_t *, int64_t, Half) override { return Fails(); }
  std::unique_ptr<Work> ReduceSum16(uint16_t *, int64_t, int64_t, Half) override { return Fails(); }
  std::unique_ptr<Work> AllGather16(uint16_t *, int64_t) override { return Fails(); }
  std::unique_ptr<Work> Broadcast16(uint16_t *, int64_t, int64_t) override { return Fails(); }
  void SetCompletionHook(CompletionHook) override {}

  bool fail = false;
  std::vector<float> peer_payload;

 private:
  static std::unique_ptr<Work> Fails() {
    return std::make_unique<DoneWork>(IoError("rank 1 is gone"));
  }
  std::string name_ = "dp";
};

CodecOptions EveryEntry() {
  CodecOptions codec;
  codec.kind = CodecKind::kTopK;
  codec.topk_ratio = 1.0;
  return codec;
}

// The payload top-k of every entry sends for `delta` (as fp32 words).
std::vector<float> PayloadOf(const std::vector<float> &delta) {
  const CodecOptions codec = EveryEntry();
  const int64_t n = int64_t(delta.size());
  std::vector<uint8_t> bytes(size_t(MaxPayloadBytes(codec, n)));
  std::vector<float> decoded(delta.size());
  std::vector<uint32_t> order(delta.size());
  const int64_t size =
      EncodeGradient(codec, delta.data(), n, bytes.data(), decoded.data(), order.data());
  std::vector<float> words(size_t(size / 4));
  std::memcpy(words.data(), bytes.data(), size_t(size));
  return words;
}

TEST(UpdateExchange, EveryRankAppliesTheMeanOfTheChangesToTheStartWeights) {
  MemoryTracker tracker;
  ScriptedPair pair;
  const std::vector<float> start = {1.0f, -2.0f, 0.5f, 4.0f};
  const std::vector<float> peer_delta = {0.25f, 0.0f, -1.0f, 2.0f};
  pair.peer_payload = PayloadOf(peer_delta);
  UpdateExchange exchange(EveryEntry(), &pair, 4, 4, &tracker);
  std::vector<float> w = start;
  exchange.Begin(w.data());
  const std::vector<float> mine = {0.75f, 1.0f, 0.0f, -2.0f};
  for (size_t i = 0; i < w.size(); ++i) w[i] += mine[i];  // this rank's own step
  ASSERT_TRUE(exchange.Finish(w.data()).ok());
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_FLOAT_EQ(w[i], start[i] + 0.5f * (mine[i] + peer_delta[i])) << i;
  EXPECT_EQ(exchange.totals().buckets, 1);
  EXPECT_EQ(exchange.totals().dense_bytes, 16);
  EXPECT_EQ(tracker.Current(MemoryCategory::kOptimizerState), UpdateExchange::StateBytes(4));
}

TEST(UpdateExchange, AFailedExchangePutsTheStartWeightsBack) {
  MemoryTracker tracker;
  ScriptedPair pair;
  pair.fail = true;
  UpdateExchange exchange(EveryEntry(), &pair, 5, 2, &tracker);  // three buckets
  const std::vector<float> start = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  std::vector<float> w = start;
  exchange.Begin(w.data());
  for (float &x : w) x *= 3.0f;
  const Status st = exchange.Finish(w.data());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 1 is gone"), std::string::npos) << st.message();
  EXPECT_EQ(w, start);
}

}  // namespace
}  // namespace dst
