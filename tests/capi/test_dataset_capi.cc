// dst_dataset_* and dst_build_info_json through libdstrain.so, as a C user sees them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dstrain/dstrain.h"

namespace {

namespace fs = std::filesystem;

bool Contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// A text file of `size` bytes in the temp dir, removed at the end of the test.
class TempTextFile {
 public:
  explicit TempTextFile(size_t size) {
    path_ = (fs::temp_directory_path() /
             ("dstrain_dataset_capi_" + std::to_string(::getpid()) + ".txt"))
                .string();
    std::string text(size, '\0');
    for (size_t i = 0; i < size; ++i) text[i] = static_cast<char>('a' + (i * 7 + i / 13) % 26);
    std::ofstream(path_, std::ios::binary) << text;
  }
  ~TempTextFile() { std::remove(path_.c_str()); }
  const char *path() const { return path_.c_str(); }

 private:
  std::string path_;
};

// Opens a dataset for the test and destroys it afterwards.
class DatasetCapiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(dst_dataset_open_text(&dataset_, file_.path(), 0.1, 3), DST_OK) << dst_last_error();
    ASSERT_NE(dataset_, nullptr);
  }
  void TearDown() override { dst_dataset_destroy(dataset_); }

  TempTextFile file_{2000};
  dst_dataset_t *dataset_ = nullptr;
};

TEST(DatasetCapiOpenTest, NullOutIsAnInvalidArgument) {
  EXPECT_EQ(dst_dataset_open_text(nullptr, "x", 0.1, 0), DST_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dst_last_error(), "out")) << dst_last_error();
}

TEST(DatasetCapiOpenTest, DestroyNullIsANoOp) {
  dst_dataset_destroy(nullptr);
}

TEST(DatasetCapiOpenTest, MissingPathIsAnIoErrorNamingIt) {
  const char *path = "/nonexistent/dstrain/missing.txt";
  dst_dataset_t *dataset = reinterpret_cast<dst_dataset_t *>(0x1);
  EXPECT_EQ(dst_dataset_open_text(&dataset, path, 0.1, 0), DST_ERR_IO);
  EXPECT_EQ(dataset, nullptr);
  EXPECT_TRUE(Contains(dst_last_error(), path)) << dst_last_error();
}

TEST(DatasetCapiOpenTest, BadValFractionIsAnInvalidArgument) {
  TempTextFile file(100);
  dst_dataset_t *dataset = nullptr;
  EXPECT_EQ(dst_dataset_open_text(&dataset, file.path(), 1.5, 0), DST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dataset, nullptr);
  EXPECT_TRUE(Contains(dst_last_error(), "val_fraction")) << dst_last_error();
}

TEST(DatasetCapiOpenTest, DefaultCorpusOpens) {
  const char *env_dir = std::getenv("DSTRAIN_DEFAULT_CORPUS_DIR");
  const std::string dir = env_dir != nullptr ? env_dir : "/usr/share/games/fortunes";
  if (!fs::is_directory(dir)) {
    GTEST_SKIP() << "default corpus " << dir
                 << " is absent; `apt-get install fortunes` to run this test";
  }
  dst_dataset_t *dataset = nullptr;
  ASSERT_EQ(dst_dataset_open_text(&dataset, nullptr, 0.1, 0), DST_OK) << dst_last_error();
  const char *path = nullptr;
  ASSERT_EQ(dst_dataset_path(dataset, &path), DST_OK);
  EXPECT_EQ(std::string(path), dir);
  size_t train = 0;
  ASSERT_EQ(dst_dataset_num_tokens(dataset, DST_SPLIT_TRAIN, &train), DST_OK);
  EXPECT_GT(train, 100000u);
  dst_dataset_destroy(dataset);
}

TEST_F(DatasetCapiTest, PathAndSplitSizes) {
  const char *path = nullptr;
  ASSERT_EQ(dst_dataset_path(dataset_, &path), DST_OK);
  EXPECT_STREQ(path, file_.path());
  size_t train = 0, val = 0;
  ASSERT_EQ(dst_dataset_num_tokens(dataset_, DST_SPLIT_TRAIN, &train), DST_OK);
  ASSERT_EQ(dst_dataset_num_tokens(dataset_, DST_SPLIT_VAL, &val), DST_OK);
  EXPECT_EQ(train, 1800u);
  EXPECT_EQ(val, 200u);
}

TEST_F(DatasetCapiTest, BatchTargetsAreTokensShiftedAndRankSlicesMatch) {
  const size_t n = 4, seq_len = 8, count = n * seq_len;
  std::vector<int32_t> tokens(count), targets(count);
  ASSERT_EQ(dst_dataset_batch(dataset_, DST_SPLIT_TRAIN, 9, 0, n, seq_len, tokens.data(),
                              targets.data(), count),
            DST_OK)
      << dst_last_error();
  for (size_t j = 0; j < n; ++j) {
    for (size_t t = 0; t + 1 < seq_len; ++t) {
      EXPECT_EQ(targets[j * seq_len + t], tokens[j * seq_len + t + 1]);
    }
  }
  std::vector<int32_t> rank1_tokens(2 * seq_len), rank1_targets(2 * seq_len);
  ASSERT_EQ(dst_dataset_batch(dataset_, DST_SPLIT_TRAIN, 9, 2, 2, seq_len, rank1_tokens.data(),
                              rank1_targets.data(), 2 * seq_len),
            DST_OK);
  EXPECT_EQ(rank1_tokens, std::vector<int32_t>(tokens.begin() + 2 * seq_len, tokens.end()));
}

TEST_F(DatasetCapiTest, NullHandleAndBuffersAreInvalidArguments) {
  size_t tokens_in_split = 0;
  const char *path = nullptr;
  int32_t buffer[8] = {};
  EXPECT_EQ(dst_dataset_num_tokens(nullptr, DST_SPLIT_TRAIN, &tokens_in_split),
            DST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dst_dataset_num_tokens(dataset_, DST_SPLIT_TRAIN, nullptr), DST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dst_dataset_path(nullptr, &path), DST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dst_dataset_path(dataset_, nullptr), DST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dst_dataset_batch(nullptr, DST_SPLIT_TRAIN, 0, 0, 1, 8, buffer, buffer, 8),
            DST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dst_dataset_batch(dataset_, DST_SPLIT_TRAIN, 0, 0, 1, 8, nullptr, buffer, 8),
            DST_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dst_last_error(), "tokens")) << dst_last_error();
  EXPECT_EQ(dst_dataset_batch(dataset_, DST_SPLIT_TRAIN, 0, 0, 1, 8, buffer, nullptr, 8),
            DST_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dst_last_error(), "targets")) << dst_last_error();
}

TEST_F(DatasetCapiTest, WrongCountNamesExpectedAndGiven) {
  std::vector<int32_t> tokens(64), targets(64);
  EXPECT_EQ(
      dst_dataset_batch(dataset_, DST_SPLIT_TRAIN, 0, 0, 4, 8, tokens.data(), targets.data(), 31),
      DST_ERR_INVALID_ARGUMENT);
  const std::string message = dst_last_error();
  EXPECT_TRUE(Contains(message, "count is 31")) << message;
  EXPECT_TRUE(Contains(message, "4 * 8 = 32")) << message;
}

TEST_F(DatasetCapiTest, ZeroSizesUnknownSplitAndTooLongWindowsAreRejected) {
  std::vector<int32_t> tokens(256), targets(256);
  EXPECT_EQ(
      dst_dataset_batch(dataset_, DST_SPLIT_TRAIN, 0, 0, 0, 8, tokens.data(), targets.data(), 0),
      DST_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dst_dataset_batch(dataset_, static_cast<dst_split_t>(7), 0, 0, 1, 8, tokens.data(),
                              targets.data(), 8),
            DST_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dst_last_error(), "split")) << dst_last_error();
  EXPECT_EQ(
      dst_dataset_batch(dataset_, DST_SPLIT_VAL, 0, 0, 1, 256, tokens.data(), targets.data(), 256),
      DST_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(dst_last_error(), "has 200 tokens")) << dst_last_error();
}

TEST(BuildInfoCapiTest, IsStaticJsonWithTheDocumentedFields) {
  EXPECT_EQ(dst_build_info_json(nullptr), DST_ERR_INVALID_ARGUMENT);
  const char *first = nullptr, *second = nullptr;
  ASSERT_EQ(dst_build_info_json(&first), DST_OK);
  ASSERT_EQ(dst_build_info_json(&second), DST_OK);
  EXPECT_EQ(first, second);
  const nlohmann::json info = nlohmann::json::parse(first);
  EXPECT_EQ(info.at("version"), dst_version());
  for (const char *key :
       {"compiler", "build_type", "cpu", "blas", "openmp", "cuda", "default_corpus"}) {
    EXPECT_TRUE(info.contains(key)) << key;
  }
  EXPECT_EQ(info.at("blas").at("library"), "OpenBLAS");
  EXPECT_TRUE(info.at("cuda").at("devices").is_array());
  EXPECT_GE(info.at("cpu").at("cores").get<int>(), 1);
}

}  // namespace
