// Resharding helpers and the streaming checksum of checkpoint files.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/checkpoint/checksum.h"
#include "core/checkpoint/reshard.h"
#include "core/layers/params.h"

namespace dst {
namespace {

TEST(Checksum64, PiecesOfAnySizeGiveTheSameDigestAsOneCall) {
  std::vector<unsigned char> data(10007);
  std::mt19937 rng(3);
  for (unsigned char &c : data) c = static_cast<unsigned char>(rng());
  Checksum64 whole;
  whole.Update(data.data(), data.size());
  for (size_t piece : {1u, 3u, 7u, 8u, 13u, 31u, 32u, 33u, 4096u}) {
    Checksum64 streamed;
    for (size_t at = 0; at < data.size(); at += piece)
      streamed.Update(data.data() + at, std::min(piece, data.size() - at));
    EXPECT_EQ(streamed.Hex(), whole.Hex()) << "piece " << piece;
    EXPECT_EQ(streamed.bytes(), data.size());
  }
}

TEST(Checksum64, DetectsAFlippedBitATruncationAndTrailingZeros) {
  std::vector<unsigned char> data(1000, 0x5a);
  auto digest = [](const std::vector<unsigned char> &d) {
    Checksum64 s;
    s.Update(d.data(), d.size());
    return s.Hex();
  };
  const std::string base = digest(data);
  EXPECT_EQ(base.size(), 16u);
  for (size_t at : {0u, 7u, 8u, 500u, 999u}) {
    std::vector<unsigned char> flipped = data;
    flipped[at] ^= 1;
    EXPECT_NE(digest(flipped), base) << at;
  }
  std::vector<unsigned char> shorter(data.begin(), data.end() - 1);
  EXPECT_NE(digest(shorter), base);
  std::vector<unsigned char> zeros(1000, 0), more_zeros(1001, 0);
  EXPECT_NE(digest(zeros), digest(more_zeros));  // the length is part of the digest
}

std::vector<float> Iota(int64_t begin, int64_t end) {
  std::vector<float> v(size_t(end - begin));
  std::iota(v.begin(), v.end(), float(begin));
  return v;
}

TEST(Reshard, AssemblesARangeFromPiecesOfAnotherLayout) {
  // Saved by 3 ranks over 10 elements (padded to 12): [0, 4), [4, 8), [8, 10).
  const std::vector<float> a = Iota(0, 4), b = Iota(4, 8), c = Iota(8, 10);
  const std::vector<FlatPiece> pieces = {
      {{8, 10}, c.data(), "r2"}, {{0, 4}, a.data(), "r0"}, {{4, 8}, b.data(), "r1"}};
  // Loaded by 2 ranks (padded to 10): rank 1 holds [5, 10).
  std::vector<float> out(5, -1);
  ASSERT_TRUE(AssembleFlat(pieces, {5, 10}, 10, "exp_avg", out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{5, 6, 7, 8, 9}));
  // Loaded by 4 ranks (padded to 12): rank 3 holds [9, 12): padding is zero.
  std::vector<float> tail(3, -1);
  ASSERT_TRUE(AssembleFlat(pieces, {9, 12}, 10, "exp_avg", tail.data()).ok());
  EXPECT_EQ(tail, (std::vector<float>{9, 0, 0}));
}

TEST(Reshard, OverlappingReplicasAreFineAndAGapIsNamed) {
  const std::vector<float> all = Iota(0, 10), first = Iota(0, 4), last = Iota(6, 10);
  std::vector<float> out(10);
  ASSERT_TRUE(AssembleFlat({{{0, 10}, all.data(), "a"}, {{0, 10}, all.data(), "b"}}, {0, 10}, 10,
                           "exp_avg", out.data())
                  .ok());
  EXPECT_EQ(out, all);
  Status st = AssembleFlat({{{0, 4}, first.data(), "r0"}, {{6, 10}, last.data(), "r2"}}, {0, 10},
                           10, "\"exp_avg\"", out.data());
  EXPECT_EQ(st.code(), Code::kCheckpoint);
  EXPECT_NE(st.message().find("[4, 6)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("exp_avg"), std::string::npos) << st.message();
}

TEST(Reshard, ConsolidatedTensorsFillAnyFlatRange) {
  SafetensorsFile file;
  auto add = [&](const std::string &name, std::vector<float> values) {
    LoadedTensor t;
    t.shape = {int64_t(values.size())};
    t.bytes.resize(values.size() * sizeof(float));
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    file.tensors.emplace(name, std::move(t));
  };
  add("w", {1, 2, 3});
  add("b", {4, 5});
  const std::vector<FlatTensor> tensors = {{"w", 0, 3}, {"b", 3, 2}};
  std::vector<float> out(4, -1);
  CopyFlatFromTensors(file, tensors, {2, 6}, out.data());  // 5 elements + padding
  EXPECT_EQ(out, (std::vector<float>{3, 4, 5, 0}));
}

}  // namespace
}  // namespace dst

namespace dst {
namespace {

// A pipeline stage's buffer [b1 (4), b2 (6), wte copy (3)] against the whole
// model [wte (3), b0 (5), b1 (4), b2 (6)]: its ranges become pieces of the
// whole model's flat state, contiguous neighbours merged, the copy skipped.
TEST(FlatMapTest, CutsAStageRangeIntoPiecesOfTheWholeModel) {
  const std::vector<FlatTensor> whole = {{"wte", 0, 3}, {"b0", 3, 5}, {"b1", 8, 4}, {"b2", 12, 6}};
  const std::vector<FlatTensor> stage = {{"b1", 0, 4}, {"b2", 4, 6}, {"wte", 10, 3}};
  const FlatMap map(stage, whole);
  const auto all = map.Cut({0, 13}, {"wte"});
  ASSERT_EQ(all.size(), 1u);  // b1, b2 are contiguous in both spaces
  EXPECT_EQ(all[0].local.begin, 0);
  EXPECT_EQ(all[0].whole.begin, 8);
  EXPECT_EQ(all[0].whole.end, 18);
  const auto with_copy = map.Cut({2, 12});
  ASSERT_EQ(with_copy.size(), 2u);
  EXPECT_EQ(with_copy[0].whole.begin, 10);  // b1 from its element 2
  EXPECT_EQ(with_copy[0].whole.end, 18);
  EXPECT_EQ(with_copy[1].local.begin, 10);  // the copy maps onto wte
  EXPECT_EQ(with_copy[1].whole.begin, 0);
  EXPECT_EQ(with_copy[1].whole.end, 2);
  EXPECT_TRUE(map.Cut({13, 16}).empty());  // padding maps to nothing
}

// A row-parallel weight's slice: tp rank 1 of 2 holds columns [2, 4) of a
// [3, 4] tensor, i.e. three runs of two elements, strided by 4 in the whole
// tensor; a range that starts and ends inside runs is cut at their bounds.
TEST(FlatMapTest, CutsATensorParallelSliceIntoItsRuns) {
  const std::vector<FlatTensor> whole = {{"b", 0, 5}, {"w", 5, 12}};
  FlatTensor slice("w", 0, 6);
  slice.run = 2;
  slice.run_starts = {2, 6, 10};
  const FlatMap map({slice, FlatTensor("b", 6, 5)}, whole);
  const auto cut = map.Cut({1, 8});
  ASSERT_EQ(cut.size(), 4u);
  EXPECT_EQ(cut[0].local.begin, 1);  // the first run from its second element
  EXPECT_EQ(cut[0].whole.begin, 8);
  EXPECT_EQ(cut[0].whole.end, 9);
  EXPECT_EQ(cut[1].whole.begin, 11);
  EXPECT_EQ(cut[2].whole.begin, 15);
  EXPECT_EQ(cut[2].whole.end, 17);
  EXPECT_EQ(cut[3].local.begin, 6);  // then b's first two elements
  EXPECT_EQ(cut[3].whole.begin, 0);
  EXPECT_EQ(cut[3].whole.end, 2);
  EXPECT_TRUE(map.Cut({0, 6}, {"w"}).empty());
}

// ParamDecl's runs agree with GlobalElement for every kind of split.
TEST(FlatMapTest, DeclarationRunsMatchGlobalElements) {
  const TensorSplit splits[] = {{0, 2, 1, 1}, {1, 2, 1, 1}, {0, 2, 1, 3}, {1, 4, 3, 1}};
  for (const TensorSplit &split : splits) {
    ParamDecl d;
    d.global_shape = {12, 8};
    d.shape = d.global_shape;
    d.shape[size_t(split.dim)] /= split.parts;
    d.split = split;
    d.numel = d.shape[0] * d.shape[1];
    const int64_t run = d.GlobalRun();
    ASSERT_EQ(d.numel % run, 0);
    for (int64_t i = 0; i < d.numel; ++i)
      EXPECT_EQ(d.GlobalElement(i), d.GlobalElement(i - i % run) + i % run)
          << "dim " << split.dim << " groups " << split.groups << " element " << i;
  }
}

TEST(FlatMapTest, PiecesRoundTripAndMalformedTextIsNamed) {
  const std::vector<FlatRange> pieces = {{0, 5}, {9, 12}};
  Result<std::vector<FlatRange>> back = ParsePieces(PiecesText(pieces), "f");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ(back.value()[1].begin, 9);
  EXPECT_EQ(back.value()[1].end, 12);
  for (const char *bad : {"", "[", "[[1,2]", "[[2,1]]", "[[1,2],]", "[[1,x]]", "[[1,2]]x"}) {
    Result<std::vector<FlatRange>> r = ParsePieces(bad, "zero_rank_0.safetensors");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("zero_rank_0.safetensors"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace dst
