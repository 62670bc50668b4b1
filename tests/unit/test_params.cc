// Parameter declarations carry the global shape and the split: a slice a
// rank stores (tensor parallelism) initialises to exactly the region of the
// global tensor it covers, whatever the split dimension.
#include <gtest/gtest.h>

#include <vector>

#include "core/layers/params.h"

namespace dst {
namespace {

// The values of tensor 0 of a one-tensor registry.
std::vector<float> Values(const std::vector<int64_t> &global, TensorSplit split) {
  ParamRegistry registry;
  registry.Add("w", global, ParamInit::Normal(1.0), split);
  ParamStore<float> store(registry, nullptr);
  store.Initialize(42);
  return std::vector<float>(store.values(), store.values() + store.size());
}

TEST(ParamDecl, UnsplitTensorsKeepTheirShape) {
  ParamRegistry registry;
  registry.Add("w", {6, 4}, ParamInit::Constant(1));
  const ParamDecl &d = registry.decls()[0];
  EXPECT_EQ(d.shape, d.global_shape);
  EXPECT_FALSE(d.split.split());
  for (int64_t i = 0; i < d.numel; ++i) EXPECT_EQ(d.GlobalElement(i), i);
}

TEST(ParamDecl, SlicesInitialiseAsTheirRegionOfTheGlobalTensor) {
  const std::vector<int64_t> global = {4, 6, 3};  // [a, b, c]
  const std::vector<float> whole = Values(global, {});
  for (int dim = 0; dim < 3; ++dim) {
    const int64_t parts = dim == 2 ? 3 : 2;
    for (int64_t index = 0; index < parts; ++index) {
      const std::vector<float> slice = Values(global, {dim, parts, index});
      ASSERT_EQ(int64_t(slice.size()), 4 * 6 * 3 / parts);
      std::vector<int64_t> local = global;
      local[size_t(dim)] /= parts;
      int64_t i = 0;
      for (int64_t a = 0; a < local[0]; ++a)
        for (int64_t b = 0; b < local[1]; ++b)
          for (int64_t c = 0; c < local[2]; ++c, ++i) {
            int64_t g[3] = {a, b, c};
            g[dim] += index * local[size_t(dim)];
            EXPECT_EQ(slice[size_t(i)], whole[size_t((g[0] * 6 + g[1]) * 3 + g[2])])
                << "dim " << dim << " part " << index << " element " << i;
          }
    }
  }
}

// A padded vocabulary: 5 rows padded to 8, split over 2 ranks (4 rows each):
// rank 0 holds global rows 0-3, rank 1 row 4 and three padding rows, which
// belong to no global element, start at 0 and form runs of one row each.
TEST(ParamDecl, PaddingRowsBelongToNoGlobalElement) {
  const std::vector<float> whole = Values({5, 3}, {});
  for (int64_t index = 0; index < 2; ++index) {
    ParamRegistry registry;
    registry.Add("w", {5, 3}, ParamInit::Normal(1.0), {0, 2, index, 1, 8});
    const ParamDecl &d = registry.decls()[0];
    EXPECT_EQ(d.shape, (std::vector<int64_t>{4, 3}));
    EXPECT_TRUE(d.split.sliced());
    EXPECT_EQ(d.GlobalRun(), 3);
    EXPECT_EQ(d.GlobalNumel(), 15);
    const std::vector<float> local = Values({5, 3}, {0, 2, index, 1, 8});
    for (int64_t i = 0; i < d.numel; ++i) {
      const int64_t row = index * 4 + i / 3;
      EXPECT_EQ(d.GlobalElement(i), row < 5 ? row * 3 + i % 3 : -1) << i;
      EXPECT_EQ(local[size_t(i)], row < 5 ? whole[size_t(row * 3 + i % 3)] : 0.0f) << i;
    }
  }
  // Padded but whole (tensor-parallel size 1): sliced, not split.
  ParamRegistry one;
  one.Add("w", {5, 3}, ParamInit::Constant(1), {0, 1, 0, 1, 8});
  EXPECT_FALSE(one.decls()[0].split.split());
  EXPECT_TRUE(one.decls()[0].split.sliced());
  EXPECT_EQ(one.decls()[0].numel, 24);
}

TEST(ParamDecl, AnUnevenSplitIsRefused) {
  ParamRegistry registry;
  EXPECT_THROW(registry.Add("w", {5, 4}, ParamInit::Constant(1), {0, 2, 0}), std::logic_error);
}

}  // namespace
}  // namespace dst
