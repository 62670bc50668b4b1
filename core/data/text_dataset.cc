#include "core/data/text_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>

#ifndef DSTRAIN_DEFAULT_CORPUS_DIR
#define DSTRAIN_DEFAULT_CORPUS_DIR "/usr/share/games/fortunes"
#endif

#include "core/common/file_kind.h"

namespace dst {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// Reading text
// ---------------------------------------------------------------------------

// Text read from disk and the name it was read under.
struct LoadedText {
  std::string path;
  std::vector<uint8_t> bytes;
};

std::string ErrnoText(int error) {
  return std::error_code(error, std::generic_category()).message();
}

struct FileCloser {
  void operator()(std::FILE *file) const { std::fclose(file); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// Memory this process could still get (the kernel's available pages).
int64_t AvailableMemoryBytes() {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : INT64_MAX;
}

// Appends the bytes of the file at `path` to `bytes`: a regular file only (a
// device such as /dev/zero would grow memory without bound, a FIFO block),
// and one that fits in the memory available (one byte per token).
Status AppendFile(const std::string &path, std::vector<uint8_t> &bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open data file '" + path + "': " + ErrnoText(errno));
  FilePtr file(::fdopen(fd, "rb"));
  if (!file) {
    ::close(fd);
    return IoError("cannot open data file '" + path + "': " + ErrnoText(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return IoError("cannot read data file '" + path + "': " + ErrnoText(errno));
  if (!S_ISREG(st.st_mode))
    return IoError("cannot read data file '" + path + "': it is " + NonRegularFileKind(st.st_mode) +
                   "; pass a text file with --data FILE");
  const int64_t available = AvailableMemoryBytes();
  if (int64_t(st.st_size) > available)
    return IoError("data file '" + path + "' is " + std::to_string(int64_t(st.st_size)) +
                   " bytes, more than the " + std::to_string(available) +
                   " bytes of memory available (a byte-level corpus is held in memory, one byte "
                   "per token); use a smaller file or free memory");
  bytes.reserve(bytes.size() + size_t(st.st_size));
  char chunk[1 << 16];
  size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof(chunk), file.get())) > 0) {
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  if (std::ferror(file.get())) {
    return IoError("cannot read data file '" + path + "': " + ErrnoText(errno));
  }
  return Status::Ok();
}

Result<LoadedText> LoadFile(const std::string &path) {
  LoadedText text{path, {}};
  DST_RETURN_IF_ERROR(AppendFile(path, text.bytes));
  if (text.bytes.empty()) {
    return InvalidArgument("data file '" + path + "' is empty; pass a file that holds text");
  }
  return text;
}

Result<LoadedText> LoadDefaultCorpus() {
  const std::string dir = DefaultCorpusDir();
  const std::vector<std::string> files = ListCorpusFiles(dir);
  if (files.empty()) {
    return IoError("the default corpus was not found: no text files in '" + dir +
                   "'; install it with `apt-get install fortunes`, set DSTRAIN_DEFAULT_CORPUS_DIR, "
                   "or pass a text file with --data FILE");
  }
  LoadedText text{dir, {}};
  for (const std::string &file : files) DST_RETURN_IF_ERROR(AppendFile(file, text.bytes));
  if (text.bytes.empty()) {
    return IoError("the default corpus in '" + dir +
                   "' is empty; pass a text file with --data FILE");
  }
  return text;
}

Status CheckValFraction(double val_fraction) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0)) {  // also rejects NaN
    return InvalidArgument("val_fraction must be in (0, 1), got " + std::to_string(val_fraction));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Counter-based window sampler
// ---------------------------------------------------------------------------

// The splitmix64 output function: a bijective mix of all 64 bits.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A random 64-bit value keyed on (seed, split, batch_index, sample) only.
uint64_t WindowKey(uint64_t seed, Split split, uint64_t batch_index, uint64_t sample) {
  uint64_t key = SplitMix64(seed);
  key = SplitMix64(key ^ static_cast<uint64_t>(split));
  key = SplitMix64(key ^ batch_index);
  return SplitMix64(key ^ sample);
}

// Maps a uniform 64-bit value onto [0, n) (Lemire's multiply-shift).
uint64_t ScaleToRange(uint64_t random, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(random) * n) >> 64);
}

}  // namespace

// ---------------------------------------------------------------------------
// Free functions
// ---------------------------------------------------------------------------

const char *SplitName(Split split) {
  return split == Split::kTrain ? "training" : "validation";
}

std::string DefaultCorpusDir() {
  const char *from_env = std::getenv("DSTRAIN_DEFAULT_CORPUS_DIR");
  if (from_env != nullptr && from_env[0] != '\0') return from_env;
  return DSTRAIN_DEFAULT_CORPUS_DIR;
}

std::vector<std::string> ListCorpusFiles(const std::string &dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find('.') != std::string::npos) continue;
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// ---------------------------------------------------------------------------
// TextDataset
// ---------------------------------------------------------------------------

TextDataset::TextDataset(std::string path, std::vector<uint8_t> bytes, size_t val_size,
                         uint64_t seed)
    : path_(std::move(path)), bytes_(std::move(bytes)), val_size_(val_size), seed_(seed) {
  for (uint8_t b : bytes_) max_token_ = std::max<int64_t>(max_token_, b);
}

TextDataset::TextDataset(std::string path, std::vector<uint16_t> tokens, size_t val_size,
                         uint64_t seed)
    : path_(std::move(path)),
      tokens_(std::move(tokens)),
      wide_(true),
      val_size_(val_size),
      seed_(seed) {
  for (uint16_t t : tokens_) max_token_ = std::max<int64_t>(max_token_, t);
}

TextDataset::TextDataset(std::string path, std::vector<uint32_t> tokens, size_t val_size,
                         uint64_t seed)
    : path_(std::move(path)),
      tokens32_(std::move(tokens)),
      wide32_(true),
      val_size_(val_size),
      seed_(seed) {
  for (uint32_t t : tokens32_) max_token_ = std::max<int64_t>(max_token_, t);
}

Result<TextDataset> TextDataset::OpenTokens(const std::string &path, double val_fraction,
                                            uint64_t seed) {
  DST_RETURN_IF_ERROR(CheckValFraction(val_fraction));
  std::vector<uint8_t> raw;
  DST_RETURN_IF_ERROR(AppendFile(path, raw));
  constexpr int32_t kLlmcMagic = 20240520;
  constexpr size_t kHeader = 256 * 4;
  size_t begin = 0;
  int32_t header[3] = {0, 0, 0};
  if (raw.size() >= kHeader) std::memcpy(header, raw.data(), sizeof header);
  int width = 2;
  if (header[0] == kLlmcMagic) {  // llm.c: header, then uint16 (v1) or uint32 (v2) tokens
    if (header[1] != 1 && header[1] != 2)
      return IoError("token file '" + path + "' is llm.c version " + std::to_string(header[1]) +
                     "; dstrain reads versions 1 (uint16 tokens) and 2 (uint32)");
    width = header[1] == 2 ? 4 : 2;
    const size_t expected = kHeader + size_t(width) * size_t(uint32_t(header[2]));
    if (header[2] < 0 || raw.size() != expected)
      return IoError("token file '" + path + "': its llm.c header says " +
                     std::to_string(header[2]) + " tokens (" + std::to_string(expected) +
                     " bytes) but the file has " + std::to_string(raw.size()) +
                     " bytes; the file is truncated or not llm.c's format");
    begin = kHeader;
  } else if (raw.size() % 2 != 0) {
    return IoError("token file '" + path + "' has an odd size (" + std::to_string(raw.size()) +
                   " bytes): expected uint16 tokens (nanoGPT's .bin) or llm.c's header; a text "
                   "file is read byte-level under any other extension");
  }
  const size_t count = (raw.size() - begin) / size_t(width);
  if (count == 0) return IoError("token file '" + path + "' holds no tokens");
  const auto val_size = static_cast<size_t>(std::floor(static_cast<double>(count) * val_fraction));
  if (width == 4) {
    std::vector<uint32_t> tokens(count);
    std::memcpy(tokens.data(), raw.data() + begin, count * 4);
    return TextDataset(path, std::move(tokens), val_size, seed);
  }
  std::vector<uint16_t> tokens(count);
  std::memcpy(tokens.data(), raw.data() + begin, count * 2);
  return TextDataset(path, std::move(tokens), val_size, seed);
}

Result<TextDataset> TextDataset::Open(const std::string &path, double val_fraction, uint64_t seed) {
  DST_RETURN_IF_ERROR(CheckValFraction(val_fraction));
  Result<LoadedText> text = path.empty() ? LoadDefaultCorpus() : LoadFile(path);
  if (!text.ok()) return text.status();
  const auto val_size =
      static_cast<size_t>(std::floor(static_cast<double>(text->bytes.size()) * val_fraction));
  return TextDataset(std::move(text->path), std::move(text->bytes), val_size, seed);
}

TextDataset::SplitRange TextDataset::range(Split split) const {
  const size_t train_size = size() - val_size_;
  if (split == Split::kTrain) return {0, train_size};
  return {train_size, val_size_};
}

size_t TextDataset::num_tokens(Split split) const {
  return range(split).size;
}

Status TextDataset::CheckRequest(const BatchRequest &request, const BatchBuffers &buffers) const {
  if (request.split != Split::kTrain && request.split != Split::kVal) {
    return InvalidArgument("unknown split " + std::to_string(static_cast<int>(request.split)) +
                           "; use train (0) or validation (1)");
  }
  if (request.n_samples == 0 || request.seq_len == 0) {
    return InvalidArgument("a batch needs n_samples > 0 and seq_len > 0, got n_samples = " +
                           std::to_string(request.n_samples) +
                           ", seq_len = " + std::to_string(request.seq_len));
  }
  size_t expected = 0;
  if (__builtin_mul_overflow(request.n_samples, request.seq_len, &expected) ||
      buffers.tokens.size() != expected || buffers.targets.size() != expected) {
    return InvalidArgument(
        "batch buffers hold " + std::to_string(buffers.tokens.size()) + " tokens and " +
        std::to_string(buffers.targets.size()) + " targets, expected n_samples * seq_len = " +
        std::to_string(request.n_samples) + " * " + std::to_string(request.seq_len) + " each");
  }
  const size_t split_size = range(request.split).size;
  if (split_size < request.seq_len + 1) {
    return InvalidArgument(
        std::string("the ") + SplitName(request.split) + " split of '" + path_ + "' has " +
        std::to_string(split_size) +
        " tokens, fewer than seq_len + 1 = " + std::to_string(request.seq_len + 1) +
        " needed for one window; use a smaller --seq-len or a bigger data file");
  }
  return Status::Ok();
}

size_t TextDataset::WindowStart(const BatchRequest &request, SplitRange split,
                                uint64_t sample) const {
  const uint64_t num_starts = split.size - request.seq_len;  // windows are seq_len + 1 long
  const uint64_t key = WindowKey(seed_, request.split, request.batch_index, sample);
  return split.begin + static_cast<size_t>(ScaleToRange(key, num_starts));
}

Status TextDataset::Batch(const BatchRequest &request, BatchBuffers buffers) const {
  DST_RETURN_IF_ERROR(CheckRequest(request, buffers));
  const SplitRange split = range(request.split);
  for (size_t j = 0; j < request.n_samples; ++j) {
    const size_t start = WindowStart(request, split, request.first_sample + j);
    int32_t *tokens = buffers.tokens.data() + j * request.seq_len;
    int32_t *targets = buffers.targets.data() + j * request.seq_len;
    auto copy = [&](const auto *window) {
      for (size_t t = 0; t < request.seq_len; ++t) {
        tokens[t] = window[t];
        targets[t] = window[t + 1];
      }
    };
    Visit([&](const auto *data) { copy(data + start); });
  }
  return Status::Ok();
}

Status TextDataset::Read(Split split, size_t offset, std::span<int32_t> out) const {
  if (split != Split::kTrain && split != Split::kVal)
    return InvalidArgument("unknown split " + std::to_string(static_cast<int>(split)) +
                           "; use train (0) or validation (1)");
  const SplitRange r = range(split);
  if (offset > r.size || out.size() > r.size - offset)
    return InvalidArgument("reading tokens [" + std::to_string(offset) + ", " +
                           std::to_string(offset + out.size()) + ") of the " + SplitName(split) +
                           " split, which holds " + std::to_string(r.size));
  Visit([&](const auto *data) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = int32_t(data[r.begin + offset + i]);
  });
  return Status::Ok();
}

}  // namespace dst
