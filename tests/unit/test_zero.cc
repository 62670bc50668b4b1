// ZeRO stages 2 and 3 without processes: the partition plan, shard-wise
// initialisation, the memory estimate, and DataParallel run by N threads over
// an in-process communicator, against the single-rank stage-0 run.
#include <gtest/gtest.h>

#include <omp.h>
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/precision/convert.h"
#include "core/zero/data_parallel.h"
#include "core/zero/memory_estimate.h"
#include "core/zero/partition_plan.h"

namespace dst {
namespace {

constexpr const char *kGpt =
    R"({"type":"gpt","vocab_size":64,"n_ctx":8,"n_layer":2,"n_head":2,"d_model":16,"seed":5})";

ModelSpec Spec(const char *text = kGpt) {
  Result<ModelSpec> spec = ParseModelSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return spec.value();
}

int IdOf(const std::vector<ParamDecl> &decls, const std::string &name) {
  for (size_t k = 0; k < decls.size(); ++k)
    if (decls[k].name == name) return int(k);
  return -1;
}

// ---------------------------------------------------------------- plan

TEST(PartitionPlan, TiedWeightIsSharedAndReducedAfterTheEmbedding) {
  MemoryTracker tracker;
  Model<float> model(Spec(), {2, 8, 1}, &tracker);
  const std::vector<ParamDecl> &decls = model.params().decls();
  const PartitionPlan plan = BuildPartitionPlan(decls, model.layer_params(), -1);
  const int wte = IdOf(decls, "transformer.wte.weight");
  const int wpe = IdOf(decls, "transformer.wpe.weight");
  ASSERT_EQ(plan.shared.slots.size(), 1u);
  EXPECT_EQ(plan.shared.slots[0].id, wte);
  EXPECT_EQ(plan.shared.size, 128 * 16);  // the vocabulary (64) padded to 128 rows
  // The embedding (layer 0) is the tied weight's last writer in backward.
  ASSERT_EQ(plan.shared_after[0].size(), 1u);
  EXPECT_EQ(plan.shared_after[0][0].begin, decls[wte].offset);
  for (size_t i = 1; i < plan.shared_after.size(); ++i) EXPECT_TRUE(plan.shared_after[i].empty());
  // The embedding stages only wpe; the head only ln_f (wte is shared).
  ASSERT_EQ(plan.grads[0].slots.size(), 1u);
  EXPECT_EQ(plan.grads[0].slots[0].id, wpe);
  EXPECT_EQ(plan.grads.back().size, 2 * 16);
  // A block's twelve tensors are one flat-contiguous segment.
  ASSERT_EQ(plan.grads[1].segments.size(), 1u);
  EXPECT_EQ(plan.grads[1].size, 12 * 16 * 16 + 13 * 16);
  EXPECT_EQ(plan.max_grad_staging, 12 * 16 * 16 + 13 * 16);
  EXPECT_TRUE(plan.params.empty());  // stage 2: parameters are not partitioned
}

TEST(PartitionPlan, PersistentTensorsAreThoseAtMostTheThreshold) {
  MemoryTracker tracker;
  Model<float> model(Spec(), {2, 8, 1}, &tracker);
  const std::vector<ParamDecl> &decls = model.params().decls();
  // C = 16: 16- and 48-element tensors persist, the 64-wide c_fc bias too
  // (DeepSpeed keeps numel <= threshold), matrices do not.
  const PartitionPlan plan = BuildPartitionPlan(decls, model.layer_params(), 64);
  std::vector<int> expected = PersistentTensors(decls, 64);
  ASSERT_EQ(plan.persistent.slots.size(), expected.size());
  int64_t elements = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(plan.persistent.slots[i].id, expected[i]);
    EXPECT_LE(decls[expected[i]].numel, 64);
    elements += decls[expected[i]].numel;
  }
  EXPECT_EQ(plan.persistent.size, elements);
  EXPECT_EQ(PersistentElements(decls, 64), elements);
  // Per block: ln_1 (2x16), attn bias 48, proj bias 16, ln_2 (2x16), fc bias 64, fc proj bias 16.
  EXPECT_EQ(elements, 2 * (32 + 48 + 16 + 32 + 64 + 16) + 32);
  // The head gathers the tied wte (declared by the embedding) but not ln_f.
  const StagingLayout &head = plan.params.back();
  ASSERT_EQ(head.slots.size(), 1u);
  EXPECT_EQ(head.slots[0].id, IdOf(decls, "transformer.wte.weight"));
  // A block gathers its four matrices: four segments, persistent tensors between them.
  EXPECT_EQ(plan.params[1].segments.size(), 4u);
  EXPECT_EQ(plan.params[1].size, 12 * 16 * 16);
  EXPECT_EQ(PersistentElements(decls, 0), 0);
}

TEST(PartitionPlan, PackMergesOnlyFlatNeighbours) {
  std::vector<ParamDecl> decls(3);
  decls[0].numel = 4, decls[0].offset = 0;
  decls[1].numel = 2, decls[1].offset = 4;
  decls[2].numel = 3, decls[2].offset = 6;
  const StagingLayout packed = PackTensors(decls, {0, 2});
  ASSERT_EQ(packed.segments.size(), 2u);
  EXPECT_EQ(packed.segments[1].begin, 6);
  EXPECT_EQ(packed.segments[1].staged, 4);
  EXPECT_EQ(packed.size, 7);
  EXPECT_EQ(PackTensors(decls, {0, 1, 2}).segments.size(), 1u);
}

TEST(ShardLayout, ForEachOwnerSplitsAtShardBoundaries) {
  const ShardLayout layout(10, 4);  // padded 12, shards of 3
  std::vector<std::vector<int64_t>> pieces;
  layout.ForEachOwner(2, 8, [&](int64_t r, int64_t b, int64_t e) { pieces.push_back({r, b, e}); });
  EXPECT_EQ(pieces, (std::vector<std::vector<int64_t>>{{0, 2, 3}, {1, 3, 6}, {2, 6, 8}}));
}

// ---------------------------------------------------------------- initialisation

TEST(ParamStore, InitializeRangeMatchesTheWholeBuffer) {
  MemoryTracker tracker;
  Model<float> model(Spec(), {2, 8, 1}, &tracker, {.pad_multiple = 7});
  const ParamStore<float> &store = model.params();
  const int64_t padded = store.padded_size();
  for (int64_t begin : {int64_t(0), int64_t(5), int64_t(1023), padded - 9}) {
    for (int64_t len : {int64_t(1), int64_t(700), padded - begin}) {
      const int64_t end = std::min(padded, begin + len);
      std::vector<float> part(size_t(end - begin), -1.0f);
      store.InitializeRange(model.spec().seed, begin, end, part.data());
      for (int64_t x = begin; x < end; ++x)
        ASSERT_EQ(part[size_t(x - begin)], store.values()[x]) << "element " << x;
    }
  }
}

TEST(ParamStore, StagesTwoAndThreeLeaveOutTheFullBuffers) {
  MemoryTracker tracker;
  Model<float> model(Spec(), {2, 8, 1}, &tracker, StoreOptionsForStage(3, 4));
  EXPECT_EQ(model.params().values(), nullptr);
  EXPECT_EQ(model.params().grads(), nullptr);
  EXPECT_EQ(tracker.Current(MemoryCategory::kParameters), 0);
  EXPECT_EQ(tracker.Current(MemoryCategory::kGradients), 0);
  EXPECT_EQ(model.params().padded_size() % 4, 0);
}

// ---------------------------------------------------------------- estimate

TEST(MemoryEstimate, StagesTwoAndThreeFollowTheZeroFormulas) {
  OptimizerConfig adamw;
  const int64_t psi = 1001, n = 4, padded = 1004, shard = 251;
  const ModelStateBytes s2 = EstimateModelState(psi, n, 2, adamw);
  EXPECT_EQ(s2.parameters, 4 * padded);
  EXPECT_EQ(s2.gradients, 4 * shard);
  EXPECT_EQ(s2.optimizer_state, 8 * shard);
  const ModelStateBytes s3 = EstimateModelState(psi, n, 3, adamw, 40);
  EXPECT_EQ(s3.parameters, 4 * (shard + 40));
  EXPECT_EQ(s3.gradients, 4 * shard);
  EXPECT_EQ(s3.total(), 16 * shard + 160);
}

// ---------------------------------------------------------------- N threads

// A communicator for N threads of one process: every collective runs when the
// last rank arrives (in rank order, so results do not depend on timing) and
// returns completed work.
class ThreadGroup {
 public:
  explicit ThreadGroup(int64_t size) : size_(size), ptrs_(size_t(size)) {}
  int64_t size() const { return size_; }
  void Run(int64_t rank, float *data, const std::function<void(std::vector<float *> &)> &fn) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t generation = generation_;
    ptrs_[size_t(rank)] = data;
    if (++arrived_ == size_) {
      fn(ptrs_);
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
  }

 private:
  int64_t size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t arrived_ = 0, generation_ = 0;
  std::vector<float *> ptrs_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup *group, int64_t rank) : group_(group), rank_(rank) {}
  int64_t rank() const override { return rank_; }
  int64_t size() const override { return group_->size(); }
  const std::string &name() const override { return name_; }
  std::unique_ptr<Work> AllReduceSum(float *data, int64_t count) override {
    return Run(data, [count](std::vector<float *> &p) {
      std::vector<float> sum = Sum(p, 0, count);
      for (float *q : p) std::copy(sum.begin(), sum.end(), q);
    });
  }
  std::unique_ptr<Work> ReduceSum(float *data, int64_t count, int64_t root) override {
    return Run(data, [count, root](std::vector<float *> &p) {
      std::vector<float> sum = Sum(p, 0, count);
      std::copy(sum.begin(), sum.end(), p[size_t(root)]);
    });
  }
  std::unique_ptr<Work> ReduceScatterSum(float *data, int64_t shard) override {
    return Run(data, [shard](std::vector<float *> &p) {
      std::vector<float> sum = Sum(p, 0, shard * int64_t(p.size()));
      for (size_t r = 0; r < p.size(); ++r)
        std::copy_n(sum.begin() + int64_t(r) * shard, shard, p[r] + int64_t(r) * shard);
    });
  }
  std::unique_ptr<Work> AllGather(float *data, int64_t shard) override {
    return Run(data, [shard](std::vector<float *> &p) {
      for (size_t from = 0; from < p.size(); ++from)
        for (size_t to = 0; to < p.size(); ++to)
          if (to != from)
            std::copy_n(p[from] + int64_t(from) * shard, shard, p[to] + int64_t(from) * shard);
    });
  }
  std::unique_ptr<Work> Broadcast(float *data, int64_t count, int64_t root) override {
    return Run(data, [count, root](std::vector<float *> &p) {
      for (float *q : p)
        if (q != p[size_t(root)]) std::copy_n(p[size_t(root)], count, q);
    });
  }
  Status Barrier() override {
    return Run(nullptr, [](std::vector<float *> &) {})->Wait();
  }
  // The ZeRO engine uses no point-to-point.
  std::unique_ptr<Work> Send(const void *, int64_t, int64_t, uint32_t) override {
    return std::make_unique<DoneWork>(InternalError("ThreadCommunicator has no send"));
  }
  std::unique_ptr<Work> Recv(void *, int64_t, int64_t, uint32_t) override {
    return std::make_unique<DoneWork>(InternalError("ThreadCommunicator has no recv"));
  }
  // 16-bit data rides through the same group (pointers are only passed along).
  std::unique_ptr<Work> AllReduceSum16(uint16_t *data, int64_t count, Half type) override {
    return Run16(data, [count, type](std::vector<uint16_t *> &p) {
      for (size_t r = 1; r < p.size(); ++r) Sum16(type, p[0], p[r], count);
      for (size_t r = 1; r < p.size(); ++r) std::copy_n(p[0], count, p[r]);
    });
  }
  std::unique_ptr<Work> ReduceSum16(uint16_t *data, int64_t count, int64_t root,
                                    Half type) override {
    return Run16(data, [count, root, type](std::vector<uint16_t *> &p) {
      std::vector<uint16_t> sum(p[0], p[0] + count);
      for (size_t r = 1; r < p.size(); ++r) Sum16(type, sum.data(), p[r], count);
      std::copy(sum.begin(), sum.end(), p[size_t(root)]);
    });
  }
  std::unique_ptr<Work> AllGather16(uint16_t *data, int64_t shard) override {
    return Run16(data, [shard](std::vector<uint16_t *> &p) {
      for (size_t from = 0; from < p.size(); ++from)
        for (size_t to = 0; to < p.size(); ++to)
          if (to != from)
            std::copy_n(p[from] + int64_t(from) * shard, shard, p[to] + int64_t(from) * shard);
    });
  }
  std::unique_ptr<Work> Broadcast16(uint16_t *data, int64_t count, int64_t root) override {
    return Run16(data, [count, root](std::vector<uint16_t *> &p) {
      for (uint16_t *q : p)
        if (q != p[size_t(root)]) std::copy_n(p[size_t(root)], count, q);
    });
  }
  void SetCompletionHook(CompletionHook) override {}

 private:
  static std::vector<float> Sum(const std::vector<float *> &p, int64_t begin, int64_t end) {
    std::vector<float> sum(size_t(end - begin), 0.0f);
    for (const float *q : p)
      for (int64_t i = begin; i < end; ++i) sum[size_t(i - begin)] += q[i];
    return sum;
  }
  std::unique_ptr<Work> Run(float *data, const std::function<void(std::vector<float *> &)> &fn) {
    group_->Run(rank_, data, fn);
    return std::make_unique<DoneWork>();
  }
  std::unique_ptr<Work> Run16(uint16_t *data,
                              const std::function<void(std::vector<uint16_t *> &)> &fn) {
    return Run(reinterpret_cast<float *>(data), [&fn](std::vector<float *> &p) {
      std::vector<uint16_t *> q;
      for (float *x : p) q.push_back(reinterpret_cast<uint16_t *>(x));
      fn(q);
    });
  }
  ThreadGroup *group_;
  int64_t rank_;
  std::string name_ = "dp";
};

using Tensors = std::vector<std::vector<float>>;  // per tensor

struct RankResult {
  std::vector<float> losses;
  Tensors first_grads;  // forward_backward before any step
  Tensors params;       // after the steps
  Tensors last_grads;   // forward_backward after the steps
  int64_t parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;
};

// Tokens of global sample `s`, position t.
int32_t Token(int64_t s, int64_t t, int64_t salt) {
  return int32_t((s * 131 + t * 17 + salt) % 64);
}

std::string ConfigText(int stage, int64_t micro, int64_t accum, int64_t dp, bool overlap) {
  return R"({"train_batch_size":)" + std::to_string(micro * accum * dp) +
         R"(,"train_micro_batch_size_per_gpu":)" + std::to_string(micro) +
         R"(,"gradient_accumulation_steps":)" + std::to_string(accum) +
         R"(,"gradient_clipping":0.05,"optimizer":{"type":"AdamW","params":{"lr":0.01,)"
         R"("weight_decay":0.1}},"zero_optimization":{"stage":)" +
         std::to_string(stage) + R"(,"overlap_comm":)" + (overlap ? "true" : "false") +
         R"(,"reduce_bucket_size":300,"stage3_param_persistence_threshold":64,)"
         R"("stage3_prefetch_bucket_size":)" +
         (overlap ? "100000" : "0") + "}}";
}

// One rank's training as Engine::Run does it: `steps` optimizer steps, then a
// forward_backward whose gathered gradients are read back.
RankResult TrainRank(int stage, int64_t accum, bool overlap, Communicator *comm) {
  omp_set_num_threads(1);  // the activation limits below are sized for one thread
  const int64_t dp = comm->size(), micro = 2, T = 8;
  ConfigContext context;
  context.world_size = dp;
  Result<Config> config = ParseConfig(ConfigText(stage, micro, accum, dp, overlap), context);
  EXPECT_TRUE(config.ok()) << config.status().message();
  MemoryTracker tracker;
  Model<float> model(Spec(), {micro, T, 1}, &tracker, StoreOptionsForStage(stage, dp));
  DataParallel zero(config.value(), &model, comm, &tracker);
  std::vector<int32_t> tokens(size_t(micro * T)), targets(size_t(micro * T));
  RankResult result;
  auto pass = [&](int64_t step, bool optimizer_step) {
    EXPECT_TRUE(zero.ZeroGradients().ok());
    double loss = 0;
    for (int64_t m = 0; m < accum; ++m) {
      for (int64_t b = 0; b < micro; ++b)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t sample = (comm->rank() * accum + m) * micro + b;  // this rank's slice
          tokens[size_t(b * T + t)] = Token(sample, t, step);
          targets[size_t(b * T + t)] = Token(sample, t + 1, step);
        }
      MicroBatch<float> mb;
      mb.B = micro, mb.seq = T, mb.tokens = tokens.data(), mb.targets = targets.data();
      mb.grad_scale = 1.0f / float(accum);
      Result<double> mb_loss = model.Forward(mb, &zero);
      EXPECT_TRUE(mb_loss.ok());
      loss += mb_loss.value();
      zero.BeginBackward(m == accum - 1, m == accum - 1);
      EXPECT_TRUE(model.Backward(mb, &zero).ok());
    }
    EXPECT_TRUE(zero.FinishReduction().ok());
    if (!optimizer_step) return;
    EXPECT_TRUE(zero.ClipGradients(0.05).ok());
    EXPECT_TRUE(zero.Step(1e-2).ok());
    result.losses.push_back(float(zero.Average(loss / double(accum)).value()));
  };
  const std::vector<ParamDecl> &decls = model.params().decls();
  // The whole averaged gradient of a forward_backward, or the parameters.
  auto read = [&](bool grads) {
    Tensors out;
    if (grads) {
      EXPECT_TRUE(zero.GatherGradients().ok());
    }
    for (size_t k = 0; k < decls.size(); ++k) {
      out.emplace_back(size_t(decls[k].numel));
      Status st = grads ? zero.ReadGrad(int(k), out.back().data())
                        : zero.ReadParam(int(k), out.back().data());
      EXPECT_TRUE(st.ok()) << st.message();
    }
    return out;
  };
  pass(0, false);
  result.first_grads = read(true);
  for (int64_t step = 0; step < 4; ++step) pass(step, true);
  result.parameter_bytes = tracker.Current(MemoryCategory::kParameters);
  result.gradient_bytes = tracker.Current(MemoryCategory::kGradients);
  result.optimizer_bytes = tracker.Current(MemoryCategory::kOptimizerState);
  result.params = read(false);
  pass(4, false);
  result.last_grads = read(true);
  return result;
}

std::vector<RankResult> TrainRanks(int stage, int64_t dp, int64_t accum, bool overlap) {
  ThreadGroup group(dp);
  std::vector<RankResult> results(static_cast<size_t>(dp));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < dp; ++r)
    threads.emplace_back([&, r] {
      ThreadCommunicator comm(&group, r);
      results[size_t(r)] = TrainRank(stage, accum, overlap, &comm);
    });
  for (auto &t : threads) t.join();
  return results;
}

// |a - b| <= tolerance * (largest |b| of the tensor), element by element.
void ExpectClose(const Tensors &a, const Tensors &b, double tolerance, const std::string &what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    float scale = 0;
    for (float v : b[k]) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < a[k].size(); ++i)
      ASSERT_NEAR(a[k][i], b[k][i], tolerance * scale)
          << what << " tensor " << k << " element " << i;
  }
}

struct Layout {
  int stage;
  int64_t dp, accum;
  bool overlap;
};

void PrintTo(const Layout &l, std::ostream *os) {
  *os << "stage " << l.stage << " dp " << l.dp << " accum " << l.accum
      << (l.overlap ? " overlap" : "");
}

class ZeroThreads : public ::testing::TestWithParam<Layout> {};

// Against the single-rank run: the same losses (1e-5 relative, the parallel
// equivalence bound), the same first gradient (reduction order only), and the
// same weights after the steps up to rounding that AdamW carries on (its
// update normalises each gradient element, so rounding in near-zero elements
// moves their weights by more than the rounding itself).
TEST_P(ZeroThreads, ReproduceTheSingleRankRun) {
  const Layout l = GetParam();
  // The single-rank run takes the same global batch in dp x accum micro-batches.
  const RankResult reference = TrainRanks(0, 1, l.dp * l.accum, false)[0];
  const std::vector<RankResult> ranks = TrainRanks(l.stage, l.dp, l.accum, l.overlap);
  MemoryTracker tracker;
  Model<float> probe(Spec(), {2, 8, 1}, &tracker);
  const ShardLayout shards(probe.params().size(), l.dp);
  const int64_t persistent = PersistentElements(probe.params().decls(), 64);
  for (const RankResult &r : ranks) {
    ASSERT_EQ(r.losses.size(), reference.losses.size());
    for (size_t s = 0; s < r.losses.size(); ++s)
      EXPECT_NEAR(r.losses[s], reference.losses[s], 1e-5 * std::fabs(reference.losses[s]));
    ExpectClose(r.first_grads, reference.first_grads, 1e-5, "first gradient");
    ExpectClose(r.params, reference.params, 1e-3, "parameter");
    ExpectClose(r.last_grads, reference.last_grads, 1e-2, "last gradient");
    const int64_t shard = shards.shard_size();
    EXPECT_EQ(r.parameter_bytes, 4 * (l.stage == 3 ? shard + persistent : shards.padded));
    EXPECT_EQ(r.gradient_bytes, 4 * (l.stage >= 2 ? shard : shards.padded));
    EXPECT_EQ(r.optimizer_bytes, 8 * shard);
  }
}

void ExpectIdentical(const RankResult &a, const RankResult &b) {
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.first_grads, b.first_grads);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.last_grads, b.last_grads);
}

// Gathering exact copies of the parameters changes no arithmetic: stage 3 is
// bit for bit stage 2 (with and without overlap and prefetch).
TEST(ZeroThreads, StageThreeIsBitIdenticalToStageTwo) {
  for (bool overlap : {false, true}) {
    const std::vector<RankResult> two = TrainRanks(2, 3, 2, overlap);
    const std::vector<RankResult> three = TrainRanks(3, 3, 2, !overlap);
    for (size_t r = 0; r < two.size(); ++r) ExpectIdentical(three[r], two[r]);
  }
}

// With one micro-batch per step, reducing per layer sums the same values in
// the same rank order as stage 1's buckets: stage 2 is bit for bit stage 1.
TEST(ZeroThreads, StageTwoWithoutAccumulationIsBitIdenticalToStageOne) {
  const std::vector<RankResult> one = TrainRanks(1, 4, 1, true);
  const std::vector<RankResult> two = TrainRanks(2, 4, 1, false);
  for (size_t r = 0; r < one.size(); ++r) ExpectIdentical(two[r], one[r]);
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroThreads,
                         ::testing::Values(Layout{2, 2, 1, false}, Layout{2, 3, 2, true},
                                           Layout{3, 2, 2, false}, Layout{3, 3, 1, true},
                                           Layout{3, 4, 2, true}, Layout{1, 3, 2, true}),
                         [](const ::testing::TestParamInfo<Layout> &info) {
                           const Layout &l = info.param;
                           return "stage" + std::to_string(l.stage) + "_dp" + std::to_string(l.dp) +
                                  "_accum" + std::to_string(l.accum) +
                                  (l.overlap ? "_overlap" : "");
                         });

TEST(ZeroThreads, GetGradBeforeForwardBackwardIsAClearError) {
  ThreadGroup group(1);
  ThreadCommunicator comm(&group, 0);
  ConfigContext context;
  Result<Config> config = ParseConfig(ConfigText(2, 2, 1, 1, false), context);
  ASSERT_TRUE(config.ok()) << config.status().message();
  MemoryTracker tracker;
  Model<float> model(Spec(), {2, 8, 1}, &tracker, StoreOptionsForStage(2, 1));
  DataParallel zero(config.value(), &model, &comm, &tracker);
  std::vector<float> out(16 * 2);
  Status st = zero.ReadGrad(int(model.params().decls().size()) - 1, out.data());
  EXPECT_EQ(st.code(), Code::kState);
  EXPECT_NE(st.message().find("forward_backward"), std::string::npos) << st.message();
}

// With bf16 storage every tensor a layer reads has a bf16 copy beside its
// fp32 working values (ParamStore::param16: the 16-bit staging it was
// widened from, which the bf16 GEMMs read), bit for bit those values
// rounded; with fp32 or fp16 storage there is none and the working values
// are the stored ones. Where the layers read
// the GEMM weights' copies (Model::Bf16Operands) those weights are not
// widened: no fp32 pointer, the copy still the tensor's bf16 values. Stages
// 0 and 3 (the local and the gathering partition).
TEST(ZeroThreads, Bf16StorageGivesEveryTensorItsBf16Copy) {
  for (const char *precision : {"bf16", "fp16", "fp32"}) {
    for (const auto &[stage, operands] : {std::pair{0, false}, {3, false}, {0, true}, {3, true}}) {
      SCOPED_TRACE(std::string(precision) + " stage " + std::to_string(stage) +
                   (operands ? " bf16 operands" : ""));
      ThreadGroup group(1);
      ThreadCommunicator comm(&group, 0);
      std::string text = ConfigText(stage, 2, 1, 1, false);
      if (std::string(precision) != "fp32")
        text.insert(text.size() - 1, R"(,")" + std::string(precision) + R"(":{"enabled":true})");
      ConfigContext context;
      Result<Config> config = ParseConfig(text, context);
      ASSERT_TRUE(config.ok()) << config.status().message();
      MemoryTracker tracker;
      Model<float> model(Spec(), {2, 8, 1}, &tracker, StoreOptionsForStage(stage, 1));
      if (operands) model.SetComputeType(ComputeType::kBf16);
      DataParallel zero(config.value(), &model, &comm, &tracker);
      ParamStore<float> &store = model.params();
      const std::vector<ParamDecl> &decls = store.decls();
      Tensors whole;
      for (size_t k = 0; k < decls.size(); ++k) {
        whole.emplace_back(size_t(decls[k].numel));
        ASSERT_TRUE(zero.ReadParam(int(k), whole.back().data()).ok());
      }
      int narrow = 0;
      for (size_t layer = 0; layer < model.layers().size(); ++layer) {
        ASSERT_TRUE(zero.BeforeForward(layer).ok());
        for (const int id : model.layer_params()[layer].ids) {  // the tensors the layer reads
          const size_t k = size_t(id);
          const uint16_t *copy = store.param16(int(k));
          if (std::string(precision) != "bf16") {
            ASSERT_EQ(copy, nullptr) << decls[k].name;
            // The working values are the stored ones widened (from the
            // staging, or in place from the shard on one rank).
            const float *values = store.param(int(k));
            ASSERT_NE(values, nullptr) << decls[k].name;
            for (int64_t i = 0; i < decls[k].numel; ++i)
              ASSERT_EQ(values[i], whole[k][size_t(i)]) << decls[k].name << " " << i;
            continue;
          }
          ASSERT_NE(copy, nullptr) << decls[k].name;
          const float *values = store.param(int(k));
          const bool left_narrow = operands && decls[k].bf16_gemm_weight &&
                                   (stage < 3 || decls[k].numel > 64);  // not persistent
          ASSERT_EQ(values == nullptr, left_narrow) << decls[k].name;
          narrow += left_narrow;
          for (int64_t i = 0; i < decls[k].numel; ++i) {
            ASSERT_EQ(copy[i], FloatToBFloat16(whole[k][size_t(i)])) << decls[k].name << " " << i;
            if (values) {
              ASSERT_EQ(copy[i], FloatToBFloat16(values[i])) << decls[k].name << " " << i;
            }
          }
        }
      }
      if (operands && std::string(precision) == "bf16") {
        EXPECT_GT(narrow, 0);
      }
    }
  }
}

}  // namespace
}  // namespace dst
