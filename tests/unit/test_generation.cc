// Generation: the attention over a key/value cache against the training
// attention over the whole sequence (every head layout), rotary embeddings
// from a position on, the generator's logits against the training model's
// forward, greedy decoding against the argmax of a full forward at every
// step, cached against uncached decoding, and the sampler's rules.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/generation/generator.h"
#include "core/kernels/cpu/attention.h"
#include "core/kernels/cpu/rotary.h"
#include "core/model/model.h"
#include "core/runtime/rng.h"

namespace dst {
namespace {

std::vector<double> Random(int64_t n, uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = StandardNormal(seed, 3, uint64_t(i));
  return v;
}

struct HeadLayout {
  const char *name;
  int64_t H, kv;
  bool interleaved;
  int64_t alibi;
};

// The cache's attention, fed the rows in pieces (a prompt, then one row at
// a time), gives the rows the whole sequence's attention gives.
TEST(Generation, CachedAttentionEqualsTheWholeSequencesForEveryHeadLayout) {
  const int64_t B = 2, T = 9, hs = 4, prompt = 4;
  for (const HeadLayout &l :
       {HeadLayout{"gpt2", 3, 3, false, 0}, HeadLayout{"gqa", 4, 2, false, 0},
        HeadLayout{"mqa", 4, 1, false, 0}, HeadLayout{"bloom", 3, 3, true, 3}}) {
    SCOPED_TRACE(l.name);
    AttentionShape whole{B, T, l.H * hs, l.H};
    whole.kv_heads = l.kv;
    whole.interleaved = l.interleaved;
    whole.alibi_heads = l.alibi;
    const int64_t W = whole.width(), C = whole.C;
    const std::vector<double> qkv = Random(B * T * W, 11);
    std::vector<double> att(size_t(B * l.H * T * T)), y(size_t(B * T * C));
    cpu::AttentionForward(qkv.data(), whole, att.data(), y.data());

    std::vector<double> kc(size_t(B * l.kv * T * hs)), vc(kc.size());
    const KvCacheView<double> cache{kc.data(), vc.data(), T};
    std::vector<double> got(size_t(B * T * C));
    for (int64_t at = 0; at < T;) {
      const int64_t n = at == 0 ? prompt : 1;
      AttentionShape s = whole;
      s.T = n;
      s.position = at;
      std::vector<double> rows(size_t(B * n * W)), out(size_t(B * n * C));
      for (int64_t b = 0; b < B; ++b)
        std::copy_n(qkv.begin() + (b * T + at) * W, n * W, rows.begin() + b * n * W);
      cpu::AttentionCached(rows.data(), s, cache, out.data());
      for (int64_t b = 0; b < B; ++b)
        std::copy_n(out.begin() + b * n * C, n * C, got.begin() + (b * T + at) * C);
      at += n;
    }
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(got[i], y[i], 1e-12) << i;
  }
}

TEST(Generation, RotaryFromAPositionEqualsTheWholeSequences) {
  AttentionShape whole{1, 7, 8, 2};
  whole.kv_heads = 1;
  const int64_t W = whole.width();
  math::RopeParams rope;
  rope.theta = 500.0;
  std::vector<double> all = Random(whole.T * W, 5);
  std::vector<double> tail(all.begin() + 5 * W, all.end());
  cpu::RotaryForward(all.data(), whole, rope, false);
  AttentionShape s = whole;
  s.T = 2;
  s.position = 5;
  cpu::RotaryForward(tail.data(), s, rope, false);
  for (size_t i = 0; i < tail.size(); ++i) EXPECT_DOUBLE_EQ(tail[i], all[5 * W + i]) << i;
}

const char *kLlama = R"({"type": "llama", "vocab_size": 50, "hidden_size": 32,
  "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "max_position_embeddings": 24, "rope_theta": 1000.0,
  "initializer_range": 0.3, "eos_token_id": 7, "seed": 5})";
const char *kGpt = R"({"type": "gpt", "vocab_size": 40, "n_ctx": 16, "n_layer": 2, "n_head": 2,
  "d_model": 16, "seed": 9})";
const char *kBloom = R"({"type": "bloom", "vocab_size": 40, "hidden_size": 16, "n_layer": 2,
  "n_head": 2, "seq_length": 16, "initializer_range": 0.3, "seed": 3})";

std::unique_ptr<Generator> OpenSpec(const char *spec, int64_t batch = 1) {
  GeneratorOptions o;
  o.model = spec;
  o.batch = batch;
  o.threads = 1;
  Result<std::unique_ptr<Generator>> g = Generator::Open(o);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(g).value() : nullptr;
}

std::vector<int32_t> Tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    t[size_t(i)] = int32_t(HashKey(seed, 1, uint64_t(i)) % uint64_t(vocab));
  return t;
}

// The generator's logits (attention over its cache, activations not kept)
// against the training model's forward (probabilities kept, the loss layer
// writing its logits), same weights from the same seed.
TEST(Generation, LogitsEqualTheTrainingForwardForEveryFamily) {
  for (const char *spec : {kGpt, kLlama, kBloom}) {
    std::unique_ptr<Generator> g = OpenSpec(spec, 2);
    ASSERT_TRUE(g);
    const int64_t B = 2, T = 11, V = g->vocab();
    const std::vector<int32_t> tokens = Tokens(B * T, V, 3);
    std::vector<float> got(size_t(B * T * V));
    ASSERT_TRUE(g->Logits(tokens.data(), B, T, got.data()).ok());

    ActivationLimits limits;
    limits.max_B = B;
    limits.max_T = T;
    MemoryTracker tracker;
    Model<float> model(g->spec(), limits, &tracker);
    std::vector<float> want(got.size());
    MicroBatch<float> mb;
    mb.B = B;
    mb.seq = T;
    mb.tokens = tokens.data();
    mb.logits = want.data();
    ASSERT_TRUE(model.Forward(mb).ok());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << i;
  }
}

int32_t Argmax(const float *x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return int32_t(best);
}

// Greedy decoding with the cache picks, at every step, the argmax of a full
// forward over the sequence so far; without the cache the same tokens.
TEST(Generation, GreedyIsTheArgmaxOfAFullForwardAtEveryStep) {
  for (const char *spec : {kGpt, kLlama, kBloom}) {
    std::unique_ptr<Generator> g = OpenSpec(spec);
    ASSERT_TRUE(g);
    const int64_t V = g->vocab();
    const std::vector<int32_t> prompt = Tokens(3, V, 8);
    GenerateOptions o;
    o.max_new_tokens = 10;
    o.sampling.temperature = 0;
    o.stop_at_eos = false;
    Result<Generated> cached = g->Generate(prompt, o);
    ASSERT_TRUE(cached.ok()) << cached.status().message();
    ASSERT_EQ(cached->tokens.size(), 10u);
    std::vector<int32_t> seq = prompt;
    for (int32_t token : cached->tokens) {
      const int64_t T = int64_t(seq.size());
      std::vector<float> logits(size_t(T * V));
      ASSERT_TRUE(g->Logits(seq.data(), 1, T, logits.data()).ok());
      EXPECT_EQ(token, Argmax(logits.data() + (T - 1) * V, V)) << "at position " << T;
      seq.push_back(token);
    }
    o.use_cache = false;
    Result<Generated> uncached = g->Generate(prompt, o);
    ASSERT_TRUE(uncached.ok());
    EXPECT_EQ(uncached->tokens, cached->tokens);
  }
}

TEST(Generation, SampledTokensFollowTheSeedWithAndWithoutTheCache) {
  std::unique_ptr<Generator> g = OpenSpec(kLlama);
  ASSERT_TRUE(g);
  const std::vector<int32_t> prompt = {1, 2, 3};
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.stop_at_eos = false;
  o.sampling = {0.9, 20, 0.95, 42};
  Result<Generated> a = g->Generate(prompt, o), b = g->Generate(prompt, o);
  o.use_cache = false;
  Result<Generated> c = g->Generate(prompt, o);
  o.use_cache = true;
  o.sampling.seed = 43;
  Result<Generated> d = g->Generate(prompt, o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->tokens, c->tokens);
  EXPECT_NE(a->tokens, d->tokens);
}

TEST(Generation, StopsAtEosTheContextAndTheCaller) {
  std::unique_ptr<Generator> g = OpenSpec(kLlama);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->eos(), std::set<int32_t>{7});
  GenerateOptions o;
  o.max_new_tokens = 100;
  o.stop_at_eos = false;
  Result<Generated> r = g->Generate({1, 2, 3, 4}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop, StopReason::kContext);
  EXPECT_EQ(r->tokens.size(), size_t(g->context() - 4));
  int seen = 0;
  r = g->Generate({1, 2}, o, [&](int32_t) { return ++seen < 3; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop, StopReason::kCaller);
  EXPECT_EQ(r->tokens.size(), 3u);
  // A prompt that ends at eos under greedy decoding is found by searching a seed.
  o.stop_at_eos = true;
  bool stopped_at_eos = false;
  for (uint64_t seed = 0; seed < 200 && !stopped_at_eos; ++seed) {
    o.sampling = {2.0, 0, 1.0, seed};
    r = g->Generate({1, 2}, o);
    ASSERT_TRUE(r.ok());
    if (r->stop == StopReason::kEos) {
      stopped_at_eos = true;
      EXPECT_EQ(r->tokens.back(), 7);
      for (size_t i = 0; i + 1 < r->tokens.size(); ++i) EXPECT_NE(r->tokens[i], 7);
    }
  }
  EXPECT_TRUE(stopped_at_eos);
}

TEST(Generation, BadPromptsAndOptionsAreNamed) {
  std::unique_ptr<Generator> g = OpenSpec(kLlama);
  ASSERT_TRUE(g);
  GenerateOptions o;
  Result<Generated> r = g->Generate({1, 50}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(
      r.status().message().find("prompt token 1 is 50, outside the model's vocabulary [0, 50)"),
      std::string::npos)
      << r.status().message();
  r = g->Generate({}, o);
  EXPECT_FALSE(r.ok());
  r = g->Generate(std::vector<int32_t>(24, 1), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the context holds 24"), std::string::npos);
  o.sampling.top_p = 0;
  r = g->Generate({1}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("top_p"), std::string::npos);
  GeneratorOptions bad;
  bad.model = kLlama;
  bad.context = 25;
  Result<std::unique_ptr<Generator>> opened = Generator::Open(bad);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("the model has 24 positions"), std::string::npos);
  bad.context = 0;
  bad.checkpoint = "/nonexistent";
  EXPECT_FALSE(Generator::Open(bad).ok());  // two sources
}

TEST(Sampler, FollowsTemperatureTopKAndTopP) {
  // p = softmax([0, log 3, -inf-ish]): 1/4, 3/4, ~0.
  const std::vector<float> logits = {0.0f, std::log(3.0f), -30.0f};
  Sampler plain({1.0, 0, 1.0, 7});
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += plain.Next(logits.data(), 3, uint64_t(i)) == 1;
  EXPECT_NEAR(double(ones) / n, 0.75, 0.015);
  Sampler top1({1.0, 1, 1.0, 7}), nucleus({1.0, 0, 0.7, 7}), greedy({0.0, 0, 1.0, 7});
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(top1.Next(logits.data(), 3, uint64_t(i)), 1);
    EXPECT_EQ(nucleus.Next(logits.data(), 3, uint64_t(i)), 1);  // 0.75 reaches 0.7
    EXPECT_EQ(greedy.Next(logits.data(), 3, uint64_t(i)), 1);
  }
  // p = 0.6, 0.3, 0.1: top_p 0.8 keeps the first two (0.6 < 0.8, then 0.9),
  // renormalised to 2/3 and 1/3; top_k 2 the same two.
  const std::vector<float> three = {std::log(6.0f), std::log(3.0f), 0.0f};
  for (Sampler cut : {Sampler({1.0, 0, 0.8, 3}), Sampler({1.0, 2, 1.0, 3})}) {
    int counts[3] = {0, 0, 0};
    for (int i = 0; i < 6000; ++i) ++counts[cut.Next(three.data(), 3, uint64_t(i))];
    EXPECT_EQ(counts[2], 0);
    EXPECT_NEAR(counts[0] / 6000.0, 2.0 / 3.0, 0.02);
  }
  Sampler all({1.0, 0, 1.0, 3});
  int thirds = 0;
  for (int i = 0; i < 6000; ++i) thirds += all.Next(three.data(), 3, uint64_t(i)) == 2;
  EXPECT_NEAR(thirds / 6000.0, 0.1, 0.015);
  // A cold temperature sharpens towards the argmax; a hot one flattens.
  Sampler cold({0.25, 0, 1.0, 9}), hot({4.0, 0, 1.0, 9});
  int cold_ones = 0, hot_ones = 0;
  for (int i = 0; i < 4000; ++i) {
    cold_ones += cold.Next(logits.data(), 3, uint64_t(i)) == 1;
    hot_ones += hot.Next(logits.data(), 3, uint64_t(i)) == 1;
  }
  EXPECT_NEAR(double(cold_ones) / 4000, 81.0 / 82.0, 0.01);  // 3^4 : 1
  EXPECT_LT(double(hot_ones) / 4000, 0.65);
  EXPECT_FALSE(CheckSampling({-1.0, 0, 1.0, 0}).ok());
  EXPECT_FALSE(CheckSampling({1.0, -2, 1.0, 0}).ok());
  EXPECT_FALSE(CheckSampling({1.0, 0, 1.5, 0}).ok());
}

}  // namespace
}  // namespace dst
