// Text files tokenized into llm.c's token-file format, what `dstrain
// tokenize` writes and `--data FILE.bin` reads: a header of 256 int32 (magic
// 20240520, version, token count), then the ids: uint16 (version 1, llm.c's
// own) where the vocabulary fits, else uint32 (version 2, dstrain's).
// Each file is read in chunks cut where a cut changes no token (between a
// letter and a space before a letter: every pre-tokenizer and SentencePiece
// start a piece there), tokenized on several threads and written in order,
// so the ids equal the whole file's encoding while memory stays a few
// chunks; each file's last `val_fraction` (from such a cut) goes to the
// validation file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace dst {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr size_t kTokenFileHeaderBytes = 256 * 4;

struct TokenizeOptions {
  int threads = 1;
  double val_fraction = 0;        // with a validation file: each file's tail share
  bool eos_after_files = true;    // the tokenizer's end-of-sequence id after each file
  bool add_special = false;       // each file encoded with the tokenizer's additions (BOS)
  size_t chunk_bytes = 16 << 10;  // the target size of a chunk (SentencePiece slows on long ones)
};

struct TokenizeReport {
  int64_t bytes = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  int version = 1;  // 1: uint16 ids, 2: uint32
  double seconds = 0;
};

// progress(bytes done, bytes in all), from the calling thread.
using TokenizeProgress = std::function<void(int64_t, int64_t)>;

// Writes `out` (and `val_out` when not empty) from `files`, each through a
// temporary file renamed into place once complete. Errors name the file.
Result<TokenizeReport> TokenizeFiles(const Tokenizer &tokenizer,
                                     const std::vector<std::string> &files, const std::string &out,
                                     const std::string &val_out, const TokenizeOptions &options,
                                     const TokenizeProgress &progress = {});

// Where a chunk of text may end at or before `target` (or, failing that,
// after it) without changing any token: an index in (begin, end], or `end`.
size_t ChunkCut(const std::string &text, size_t begin, size_t target, size_t end);

}  // namespace dst
