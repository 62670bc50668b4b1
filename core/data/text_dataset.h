// TextDataset: a text file (or the default corpus) as a byte-level token stream
// (vocab 256), split into a training and a validation part, from which batches
// of random windows are drawn by a counter-based RNG. A batch depends only on
// (seed, split, batch_index, sample index), so there is no hidden sampler
// state: the data position of a run is just the batch index, and a
// data-parallel rank asking for samples [first_sample, first_sample + n) gets
// exactly its slice of the batch a single rank would see.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/common/status.h"

namespace dst {

inline constexpr int kByteVocabSize = 256;

enum class Split { kTrain = 0, kVal = 1 };

// "training" / "validation", for messages.
const char *SplitName(Split split);

// Which windows a batch holds: samples [first_sample, first_sample + n_samples)
// of batch `batch_index`, each seq_len tokens long.
struct BatchRequest {
  Split split = Split::kTrain;
  uint64_t batch_index = 0;
  uint64_t first_sample = 0;
  size_t n_samples = 0;
  size_t seq_len = 0;

  // n_samples * seq_len: the element count of the tokens and targets buffers.
  size_t num_elements() const { return n_samples * seq_len; }
};

// Where a batch is written: [n_samples, seq_len] each, row-major.
struct BatchBuffers {
  std::span<int32_t> tokens;
  std::span<int32_t> targets;  // tokens shifted by one
};

// The directory of the default corpus: $DSTRAIN_DEFAULT_CORPUS_DIR if set,
// else the compile-time DSTRAIN_DEFAULT_CORPUS_DIR (Debian's fortunes).
std::string DefaultCorpusDir();

// The files that make up a corpus directory: regular files directly in `dir`
// whose name has no '.' (this skips fortune's *.dat and *.u8), sorted by name.
// An empty list when the directory is missing or holds no such file.
std::vector<std::string> ListCorpusFiles(const std::string &dir);

class TextDataset {
 public:
  // Reads `path` (empty: every file of DefaultCorpusDir(), concatenated) and
  // keeps the last `val_fraction` (0 < val_fraction < 1) of its bytes as the
  // validation split. `seed` keys the window sampler.
  static Result<TextDataset> Open(const std::string &path, double val_fraction, uint64_t seed);
  // A file of token ids (a tokenizer's output, e.g. GPT-2's): llm.c's .bin (a
  // 256 x int32 header: magic 20240520, version, token count; then the
  // tokens: uint16 in version 1, uint32 in version 2, `dstrain tokenize`'s
  // for vocabularies beyond 65536) or nanoGPT's raw train.bin / val.bin
  // (uint16 tokens alone).
  static Result<TextDataset> OpenTokens(const std::string &path, double val_fraction,
                                        uint64_t seed);
  // The largest token id in the data (255 at most for text).
  int64_t max_token() const { return max_token_; }

  // Tokens in a split.
  size_t num_tokens(Split split) const;
  // The file (or corpus directory) the dataset was read from.
  const std::string &path() const { return path_; }
  uint64_t seed() const { return seed_; }

  // Fills `buffers` with the windows `request` names. Each buffer must hold
  // exactly request.num_elements() values.
  Status Batch(const BatchRequest &request, BatchBuffers buffers) const;
  // out = the split's tokens [offset, offset + out.size()), in order (an
  // evaluation's windows over a whole file).
  Status Read(Split split, size_t offset, std::span<int32_t> out) const;

 private:
  // A split is the byte range [begin, begin + size) of the text.
  struct SplitRange {
    size_t begin = 0;
    size_t size = 0;
  };

  TextDataset(std::string path, std::vector<uint8_t> bytes, size_t val_size, uint64_t seed);
  TextDataset(std::string path, std::vector<uint16_t> tokens, size_t val_size, uint64_t seed);
  TextDataset(std::string path, std::vector<uint32_t> tokens, size_t val_size, uint64_t seed);
  size_t size() const {
    return wide32_ ? tokens32_.size() : wide_ ? tokens_.size() : bytes_.size();
  }
  // fn(data) with a pointer to the stored tokens (uint8, uint16 or uint32).
  template <typename Fn>
  void Visit(Fn &&fn) const {
    if (wide32_)
      fn(tokens32_.data());
    else if (wide_)
      fn(tokens_.data());
    else
      fn(bytes_.data());
  }

  SplitRange range(Split split) const;
  Status CheckRequest(const BatchRequest &request, const BatchBuffers &buffers) const;
  size_t WindowStart(const BatchRequest &request, SplitRange split, uint64_t sample) const;

  std::string path_;
  std::vector<uint8_t> bytes_;      // text: one byte per token
  std::vector<uint16_t> tokens_;    // token files of uint16 ids
  std::vector<uint32_t> tokens32_;  // token files of uint32 ids (version 2)
  bool wide_ = false;               // tokens_ holds the data
  bool wide32_ = false;             // tokens32_ holds the data
  int64_t max_token_ = 0;
  size_t val_size_ = 0;
  uint64_t seed_ = 0;
};

}  // namespace dst
