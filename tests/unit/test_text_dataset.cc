// TextDataset: splits, deterministic counter-based windows, rank slices, errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/data/text_dataset.h"

namespace dst {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("dstrain_text_dataset_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Write(const std::string &name, const std::string &contents) const {
    const fs::path file = path_ / name;
    std::ofstream(file, std::ios::binary) << contents;
    return file.string();
  }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

// Sets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const std::string &value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char *name_;
};

// Text whose every window is distinguishable: a pseudo-random byte stream.
std::string VariedText(size_t size) {
  std::string text(size, '\0');
  uint32_t state = 12345;
  for (char &c : text) {
    state = state * 1664525u + 1013904223u;
    c = static_cast<char>(state >> 24);
  }
  return text;
}

struct TokenBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
};

TokenBatch MustBatch(const TextDataset &data, const BatchRequest &request) {
  TokenBatch batch{std::vector<int32_t>(request.num_elements()),
                   std::vector<int32_t>(request.num_elements())};
  const Status status = data.Batch(request, {batch.tokens, batch.targets});
  EXPECT_TRUE(status.ok()) << status.message();
  return batch;
}

TextDataset MustOpen(const std::string &path, double val_fraction = 0.1, uint64_t seed = 7) {
  Result<TextDataset> data = TextDataset::Open(path, val_fraction, seed);
  EXPECT_TRUE(data.ok()) << data.status().message();
  return std::move(data).value();
}

TEST(TextDatasetTest, ValidationSplitIsTheLastFractionOfTheBytes) {
  TempDir dir;
  const TextDataset data = MustOpen(dir.Write("text", VariedText(1000)), 0.25);
  EXPECT_EQ(data.num_tokens(Split::kTrain), 750u);
  EXPECT_EQ(data.num_tokens(Split::kVal), 250u);
  EXPECT_EQ(data.path(), dir.path() + "/text");
}

TEST(TextDatasetTest, WindowsStayInsideTheirSplit) {
  TempDir dir;
  const TextDataset data =
      MustOpen(dir.Write("text", std::string(900, 'a') + std::string(100, 'b')));
  const TokenBatch train = MustBatch(data, {Split::kTrain, 3, 0, 64, 16});
  const TokenBatch val = MustBatch(data, {Split::kVal, 3, 0, 64, 16});
  for (int32_t token : train.tokens) ASSERT_EQ(token, 'a');
  for (int32_t token : train.targets) ASSERT_EQ(token, 'a');
  for (int32_t token : val.tokens) ASSERT_EQ(token, 'b');
  for (int32_t token : val.targets) ASSERT_EQ(token, 'b');
}

TEST(TextDatasetTest, TokensAreBytesAndTargetsAreTokensShiftedByOne) {
  TempDir dir;
  const std::string text = VariedText(4096);
  const TextDataset data = MustOpen(dir.Write("text", text));
  const size_t seq_len = 32;
  const TokenBatch batch = MustBatch(data, {Split::kTrain, 0, 0, 8, seq_len});
  for (size_t j = 0; j < 8; ++j) {
    std::string window;
    for (size_t t = 0; t < seq_len; ++t) {
      const int32_t token = batch.tokens[j * seq_len + t];
      ASSERT_GE(token, 0);
      ASSERT_LT(token, kByteVocabSize);
      window.push_back(static_cast<char>(token));
      if (t + 1 < seq_len) {
        ASSERT_EQ(batch.targets[j * seq_len + t], batch.tokens[j * seq_len + t + 1]);
      }
    }
    window.push_back(static_cast<char>(batch.targets[j * seq_len + seq_len - 1]));
    EXPECT_NE(text.find(window), std::string::npos) << "sample " << j << " is not a text window";
  }
}

TEST(TextDatasetTest, BatchesAreDeterministicPerBatchIndexAndSample) {
  TempDir dir;
  const std::string file = dir.Write("text", VariedText(8192));
  const TextDataset first = MustOpen(file, 0.1, 42);
  const TextDataset second = MustOpen(file, 0.1, 42);
  const BatchRequest request{Split::kTrain, 5, 0, 4, 16};
  EXPECT_EQ(MustBatch(first, request).tokens, MustBatch(first, request).tokens);
  EXPECT_EQ(MustBatch(first, request).tokens, MustBatch(second, request).tokens);

  const BatchRequest next_batch{Split::kTrain, 6, 0, 4, 16};
  EXPECT_NE(MustBatch(first, request).tokens, MustBatch(first, next_batch).tokens);
  const TextDataset other_seed = MustOpen(file, 0.1, 43);
  EXPECT_NE(MustBatch(first, request).tokens, MustBatch(other_seed, request).tokens);
}

TEST(TextDatasetTest, RankSlicesEqualTheSingleRankBatch) {
  TempDir dir;
  const TextDataset data = MustOpen(dir.Write("text", VariedText(8192)));
  const size_t seq_len = 16, per_rank = 2, ranks = 4;
  for (Split split : {Split::kTrain, Split::kVal}) {
    const TokenBatch whole = MustBatch(data, {split, 11, 0, per_rank * ranks, seq_len});
    for (size_t rank = 0; rank < ranks; ++rank) {
      const TokenBatch slice = MustBatch(data, {split, 11, rank * per_rank, per_rank, seq_len});
      const auto begin = static_cast<std::ptrdiff_t>(rank * per_rank * seq_len);
      const auto end = begin + static_cast<std::ptrdiff_t>(per_rank * seq_len);
      EXPECT_EQ(slice.tokens,
                std::vector<int32_t>(whole.tokens.begin() + begin, whole.tokens.begin() + end))
          << SplitName(split) << " rank " << rank;
      EXPECT_EQ(slice.targets,
                std::vector<int32_t>(whole.targets.begin() + begin, whole.targets.begin() + end))
          << SplitName(split) << " rank " << rank;
    }
  }
}

TEST(TextDatasetTest, MissingFileIsAnIoErrorNamingThePath) {
  const std::string path = "/nonexistent/dstrain/no_such_file.txt";
  const Result<TextDataset> data = TextDataset::Open(path, 0.1, 1);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), Code::kIo);
  EXPECT_NE(data.status().message().find(path), std::string::npos) << data.status().message();
  EXPECT_NE(data.status().message().find("No such file"), std::string::npos)
      << data.status().message();
}

TEST(TextDatasetTest, DirectoryAndEmptyFileAreRejected) {
  TempDir dir;
  const Result<TextDataset> directory = TextDataset::Open(dir.path(), 0.1, 1);
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find("directory"), std::string::npos);

  const Result<TextDataset> empty = TextDataset::Open(dir.Write("empty", ""), 0.1, 1);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
}

// A device would grow memory without bound and a FIFO block forever: both
// are refused by name, at once.
TEST(TextDatasetTest, DevicesAndFifosAreRefusedByName) {
  const Result<TextDataset> zero = TextDataset::Open("/dev/zero", 0.1, 1);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("is a character device"), std::string::npos)
      << zero.status().message();
  TempDir dir;
  const std::string fifo = dir.path() + "/corpus.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const Result<TextDataset> pipe = TextDataset::Open(fifo, 0.1, 1);
  ASSERT_FALSE(pipe.ok());
  EXPECT_NE(pipe.status().message().find("is a FIFO"), std::string::npos)
      << pipe.status().message();
}

// A file larger than the memory available is refused with both numbers
// (sparse, so it costs no disk).
TEST(TextDatasetTest, AFileLargerThanMemoryIsRefusedWithTheNumbers) {
  TempDir dir;
  const std::string path = dir.Write("huge", "x");
  ASSERT_EQ(truncate(path.c_str(), off_t(1) << 42), 0);  // 4 TiB
  const Result<TextDataset> data = TextDataset::Open(path, 0.1, 1);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find(std::to_string(int64_t(1) << 42) + " bytes"),
            std::string::npos)
      << data.status().message();
  EXPECT_NE(data.status().message().find("of memory available"), std::string::npos);
}

TEST(TextDatasetTest, ValFractionOutsideZeroOneIsRejected) {
  TempDir dir;
  const std::string file = dir.Write("text", VariedText(100));
  for (double fraction : {0.0, 1.0, -0.5, 2.0}) {
    const Result<TextDataset> data = TextDataset::Open(file, fraction, 1);
    ASSERT_FALSE(data.ok()) << fraction;
    EXPECT_EQ(data.status().code(), Code::kInvalidArgument);
  }
}

TEST(TextDatasetTest, SplitSmallerThanAWindowNamesSizesAndFix) {
  TempDir dir;
  const TextDataset data = MustOpen(dir.Write("text", VariedText(1000)), 0.05);  // val: 50 bytes
  std::vector<int32_t> tokens(64), targets(64);
  const Status status = data.Batch({Split::kVal, 0, 0, 1, 64}, {tokens, targets});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_NE(status.message().find("validation split"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("has 50 tokens"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("seq_len + 1 = 65"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("--seq-len"), std::string::npos) << status.message();

  // A window of exactly the split size fits.
  std::vector<int32_t> fit_tokens(49), fit_targets(49);
  EXPECT_TRUE(data.Batch({Split::kVal, 0, 0, 1, 49}, {fit_tokens, fit_targets}).ok());
}

TEST(TextDatasetTest, ZeroSizesAndWrongBuffersAreRejected) {
  TempDir dir;
  const TextDataset data = MustOpen(dir.Write("text", VariedText(1000)));
  std::vector<int32_t> tokens(16), targets(16);
  EXPECT_EQ(data.Batch({Split::kTrain, 0, 0, 0, 16}, {tokens, targets}).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(data.Batch({Split::kTrain, 0, 0, 1, 0}, {tokens, targets}).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(data.Batch({Split::kTrain, 0, 0, 2, 16}, {tokens, targets}).code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(data.Batch({Split::kTrain, 0, 0, 1, 16}, {tokens, targets}).ok());
}

TEST(TextDatasetTest, DefaultCorpusConcatenatesFilesWithoutDotsByName) {
  TempDir dir;
  dir.Write("beta", "BBBB");
  dir.Write("alpha", "AAAA");
  dir.Write("alpha.dat", "index");
  dir.Write("alpha.u8", "utf8");
  std::filesystem::create_directory(dir.path() + "/subdir");
  const ScopedEnv env("DSTRAIN_DEFAULT_CORPUS_DIR", dir.path());

  EXPECT_EQ(DefaultCorpusDir(), dir.path());
  const std::vector<std::string> files = ListCorpusFiles(dir.path());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], dir.path() + "/alpha");
  EXPECT_EQ(files[1], dir.path() + "/beta");

  const TextDataset data = MustOpen("", 0.5);
  EXPECT_EQ(data.path(), dir.path());
  EXPECT_EQ(data.num_tokens(Split::kTrain), 4u);
  const TokenBatch train = MustBatch(data, {Split::kTrain, 0, 0, 1, 3});
  EXPECT_EQ(train.tokens, std::vector<int32_t>({'A', 'A', 'A'}));
  const TokenBatch val = MustBatch(data, {Split::kVal, 0, 0, 1, 3});
  EXPECT_EQ(val.tokens, std::vector<int32_t>({'B', 'B', 'B'}));
}

TEST(TextDatasetTest, MissingDefaultCorpusSaysHowToGetIt) {
  const ScopedEnv env("DSTRAIN_DEFAULT_CORPUS_DIR", "/nonexistent/dstrain/corpus");
  const Result<TextDataset> data = TextDataset::Open("", 0.1, 1);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), Code::kIo);
  EXPECT_NE(data.status().message().find("/nonexistent/dstrain/corpus"), std::string::npos);
  EXPECT_NE(data.status().message().find("apt-get install fortunes"), std::string::npos);
  EXPECT_NE(data.status().message().find("--data FILE"), std::string::npos);
}

}  // namespace
}  // namespace dst
