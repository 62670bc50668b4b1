#include "core/zero/grad_codec.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>

namespace dst {

namespace {

int64_t RoundUp4(int64_t bytes) {
  return (bytes + 3) / 4 * 4;
}
int64_t Chunks(int64_t n, int64_t chunk) {
  return (n + chunk - 1) / chunk;
}

Status Corrupt(const char *codec, const std::string &what) {
  return InternalError(std::string("compressed gradient payload (") + codec +
                       ") does not decode: " + what +
                       "; every rank must run the same gradient_compression settings");
}

// ---------------------------------------------------------------- top-k

// Magnitude as a selection key; NaN counts as the largest, so an overflow
// always travels and the loss scaler sees it.
float Key(float v) {
  return std::isnan(v) ? std::numeric_limits<float>::infinity() : std::fabs(v);
}

// order[0, k): the k indices of largest magnitude (ties: the lower index),
// ascending; order has n entries.
void SelectTopK(const float *value, int64_t n, int64_t k, uint32_t *order) {
  std::iota(order, order + n, 0u);
  auto larger = [&](uint32_t a, uint32_t b) {
    const float ka = Key(value[a]), kb = Key(value[b]);
    return ka != kb ? ka > kb : a < b;
  };
  if (k < n) std::nth_element(order, order + k, order + n, larger);
  std::sort(order, order + k);
}

// Huffman-coded index deltas: symbol = bit length of the delta (1..32).
constexpr int kSymbols = 33;
constexpr int64_t kHuffmanHeader = 8 + 36;  // k, bitstream bytes, 33 code lengths (+3 pad)

int BitLength(uint32_t d) {
  return 32 - std::countl_zero(d);
}

// Code lengths of a Huffman code for the frequencies (0 for absent symbols).
std::array<uint8_t, kSymbols> HuffmanLengths(const std::array<int64_t, kSymbols> &freq) {
  std::array<uint8_t, kSymbols> lengths{};
  struct Node {
    int64_t weight;
    int id;  // < kSymbols: a leaf
  };
  std::vector<int> parent(2 * kSymbols, -1);
  auto heavier = [](const Node &a, const Node &b) {
    return a.weight != b.weight ? a.weight > b.weight : a.id > b.id;
  };
  std::priority_queue<Node, std::vector<Node>, decltype(heavier)> queue(heavier);
  for (int s = 0; s < kSymbols; ++s)
    if (freq[size_t(s)] > 0) queue.push({freq[size_t(s)], s});
  if (queue.size() == 1) {  // one symbol still needs one bit
    lengths[size_t(queue.top().id)] = 1;
    return lengths;
  }
  int next = kSymbols;
  while (queue.size() > 1) {
    const Node a = queue.top();
    queue.pop();
    const Node b = queue.top();
    queue.pop();
    parent[size_t(a.id)] = parent[size_t(b.id)] = next;
    queue.push({a.weight + b.weight, next++});
  }
  for (int s = 0; s < kSymbols; ++s) {
    if (freq[size_t(s)] == 0) continue;
    int depth = 0;
    for (int at = s; parent[size_t(at)] >= 0; at = parent[size_t(at)]) ++depth;
    lengths[size_t(s)] = uint8_t(depth);
  }
  return lengths;
}

// Canonical codes: symbols ordered by (length, symbol) take consecutive codes.
struct CanonicalCode {
  std::array<uint32_t, kSymbols> code{};
  std::array<int, kSymbols + 1> count{};  // codes per length
  std::vector<int> sorted;                // symbols by (length, symbol)
};

CanonicalCode Canonical(const std::array<uint8_t, kSymbols> &lengths) {
  CanonicalCode c;
  for (int s = 0; s < kSymbols; ++s)
    if (lengths[size_t(s)] > 0) {
      c.sorted.push_back(s);
      ++c.count[lengths[size_t(s)]];
    }
  std::stable_sort(c.sorted.begin(), c.sorted.end(),
                   [&](int a, int b) { return lengths[size_t(a)] < lengths[size_t(b)]; });
  uint32_t code = 0;
  int length = 0;
  for (int s : c.sorted) {
    while (length < lengths[size_t(s)]) {
      code <<= 1;
      ++length;
    }
    c.code[size_t(s)] = code++;
  }
  return c;
}

class BitWriter {
 public:
  explicit BitWriter(uint8_t *out) : out_(out) {}
  int64_t bytes() const { return written_; }
  void Put(uint32_t bits, int count) {  // the low `count` bits, most significant first
    for (int i = count - 1; i >= 0; --i) {
      acc_ = uint8_t(acc_ << 1 | ((bits >> i) & 1u));
      if (++filled_ == 8) Flush();
    }
  }
  void Finish() {
    if (filled_ > 0) {
      acc_ = uint8_t(acc_ << (8 - filled_));
      Flush();
    }
  }

 private:
  void Flush() {
    out_[written_++] = acc_;
    acc_ = 0;
    filled_ = 0;
  }
  uint8_t *out_;
  int64_t written_ = 0;
  uint8_t acc_ = 0;
  int filled_ = 0;
};

class BitReader {
 public:
  BitReader(const uint8_t *data, int64_t bytes) : data_(data), bits_(bytes * 8) {}
  bool Get(uint32_t *bit) {
    if (pos_ >= bits_) return false;
    *bit = (data_[pos_ / 8] >> (7 - pos_ % 8)) & 1u;
    ++pos_;
    return true;
  }

 private:
  const uint8_t *data_;
  int64_t bits_, pos_ = 0;
};

void PutWord(uint8_t *out, int64_t at, uint32_t word) {
  std::memcpy(out + at, &word, 4);
}
uint32_t GetWord(const uint8_t *in, int64_t at) {
  uint32_t word;
  std::memcpy(&word, in + at, 4);
  return word;
}

// Writes the header and bit stream at out; returns the bytes written (a multiple of 4).
int64_t EncodeHuffmanIndices(const uint32_t *index, int64_t k, uint8_t *out) {
  std::array<int64_t, kSymbols> freq{};
  uint32_t previous = 0;
  for (int64_t i = 0; i < k; ++i) {
    ++freq[size_t(BitLength(index[i] + 1 - previous))];  // deltas >= 1
    previous = index[i] + 1;
  }
  const std::array<uint8_t, kSymbols> lengths = HuffmanLengths(freq);
  const CanonicalCode code = Canonical(lengths);
  std::memset(out, 0, kHuffmanHeader);
  PutWord(out, 0, uint32_t(k));
  std::memcpy(out + 8, lengths.data(), kSymbols);
  BitWriter writer(out + kHuffmanHeader);
  previous = 0;
  for (int64_t i = 0; i < k; ++i) {
    const uint32_t delta = index[i] + 1 - previous;
    const int length = BitLength(delta);
    writer.Put(code.code[size_t(length)], lengths[size_t(length)]);
    writer.Put(delta, length - 1);  // the bits below the leading one
    previous = index[i] + 1;
  }
  writer.Finish();
  PutWord(out, 4, uint32_t(writer.bytes()));
  const int64_t bytes = kHuffmanHeader + writer.bytes();
  std::memset(out + bytes, 0, size_t(RoundUp4(bytes) - bytes));
  return RoundUp4(bytes);
}

// Reads k Huffman-coded indices (ascending, < n) starting at `at`.
Status DecodeHuffmanIndices(const uint8_t *payload, int64_t bytes, int64_t at, int64_t k, int64_t n,
                            std::vector<uint32_t> *index) {
  if (at + kHuffmanHeader > bytes) return Corrupt("topk", "header past the end");
  if (GetWord(payload, at) != uint32_t(k)) return Corrupt("topk", "entry count differs");
  const int64_t stream_bytes = GetWord(payload, at + 4);
  std::array<uint8_t, kSymbols> lengths{};
  std::memcpy(lengths.data(), payload + at + 8, kSymbols);
  for (uint8_t l : lengths)
    if (l > 32) return Corrupt("topk", "code length above 32");
  const int64_t stream = at + kHuffmanHeader;
  if (stream + stream_bytes > bytes) return Corrupt("topk", "bit stream past the end");
  const CanonicalCode code = Canonical(lengths);
  BitReader reader(payload + stream, stream_bytes);
  index->resize(size_t(k));
  uint64_t previous = 0;
  for (int64_t i = 0; i < k; ++i) {
    // Canonical decoding: at each length, the codes in [first, first + count).
    uint32_t value = 0, first = 0, bit = 0;
    int offset = 0, symbol = -1;
    for (int length = 1; length <= 32 && symbol < 0; ++length) {
      if (!reader.Get(&bit)) return Corrupt("topk", "bit stream ends early");
      value = value << 1 | bit;
      const int count = code.count[size_t(length)];
      if (value - first < uint32_t(count))
        symbol = code.sorted[size_t(offset + int(value - first))];
      first = (first + uint32_t(count)) << 1;
      offset += count;
    }
    if (symbol < 1) return Corrupt("topk", "no code matches");
    uint32_t delta = 1;
    for (int b = 0; b < symbol - 1; ++b) {
      if (!reader.Get(&bit)) return Corrupt("topk", "bit stream ends early");
      delta = delta << 1 | bit;
    }
    previous += delta;
    if (previous > uint64_t(n)) return Corrupt("topk", "index out of range");
    (*index)[size_t(i)] = uint32_t(previous - 1);
  }
  return Status::Ok();
}

int64_t EncodeTopK(const CodecOptions &options, const float *value, int64_t n, uint8_t *payload,
                   float *decoded, uint32_t *order) {
  const int64_t k = TopKCount(options.topk_ratio, n);
  SelectTopK(value, n, k, order);
  std::fill(decoded, decoded + n, 0.0f);
  for (int64_t i = 0; i < k; ++i) {  // the values first, then the indices
    const uint32_t at = order[i];
    decoded[at] = value[at];
    std::memcpy(payload + 4 * i, &value[at], 4);
  }
  if (options.huffman) return 4 * k + EncodeHuffmanIndices(order, k, payload + 4 * k);
  std::memcpy(payload + 4 * k, order, size_t(4 * k));
  return 8 * k;
}

Status DecodeAddTopK(const CodecOptions &options, const uint8_t *payload, int64_t bytes, int64_t n,
                     float *sum) {
  const int64_t k = TopKCount(options.topk_ratio, n);
  if (bytes < 4 * k) return Corrupt("topk", "shorter than its values");
  std::vector<uint32_t> index;
  if (options.huffman) {
    DST_RETURN_IF_ERROR(DecodeHuffmanIndices(payload, bytes, 4 * k, k, n, &index));
  } else {
    if (bytes != 8 * k) return Corrupt("topk", "size differs");
    index.resize(size_t(k));
    std::memcpy(index.data(), payload + 4 * k, size_t(4 * k));
    for (uint32_t at : index)
      if (at >= uint64_t(n)) return Corrupt("topk", "index out of range");
  }
  for (int64_t i = 0; i < k; ++i) {
    float v;
    std::memcpy(&v, payload + 4 * i, 4);
    sum[index[size_t(i)]] += v;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- 1-bit, 2-bit

int BitsPerValue(CodecKind kind) {
  return kind == CodecKind::kOneBit ? 1 : 2;
}

// The value of 2-bit code q (0..3) at scale s: -s, -s/3, s/3, s.
float TwoBitLevel(uint32_t q, float s) {
  return float(int(2 * q) - 3) / 3.0f * s;
}

uint32_t TwoBitCode(float v, float s) {
  if (!(s > 0)) return 2;  // all zero (or not finite: the scale carries it)
  const float t = std::nearbyint(v / s * 1.5f + 1.5f);
  return uint32_t(std::clamp(t, 0.0f, 3.0f));
}

int64_t EncodeQuantized(const CodecOptions &options, const float *value, int64_t n,
                        uint8_t *payload, float *decoded) {
  const CodecKind kind = options.kind;
  const int bits = BitsPerValue(kind);
  const int64_t chunks = Chunks(n, options.chunk);
  const int64_t bytes = 4 * chunks + RoundUp4((n * bits + 7) / 8);
  std::memset(payload, 0, size_t(bytes));
  uint8_t *packed = payload + 4 * chunks;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * options.chunk, end = std::min(n, begin + options.chunk);
    double total = 0;
    float largest = 0;
    for (int64_t i = begin; i < end; ++i) {
      total += std::fabs(double(value[i]));
      largest = std::max(largest, std::fabs(value[i]));
      if (std::isnan(value[i])) largest = value[i];
    }
    const float scale = kind == CodecKind::kOneBit ? float(total / double(end - begin)) : largest;
    std::memcpy(payload + 4 * c, &scale, 4);
    for (int64_t i = begin; i < end; ++i) {
      uint32_t q;
      if (kind == CodecKind::kOneBit) {
        q = std::signbit(value[i]) ? 1u : 0u;
        decoded[i] = q ? -scale : scale;
      } else {
        q = TwoBitCode(value[i], scale);
        decoded[i] = TwoBitLevel(q, scale);
      }
      packed[(i * bits) / 8] |= uint8_t(q << ((i * bits) % 8));
    }
  }
  return bytes;
}

Status DecodeAddQuantized(const CodecOptions &options, const uint8_t *payload, int64_t bytes,
                          int64_t n, float *sum) {
  const CodecKind kind = options.kind;
  const int bits = BitsPerValue(kind);
  const int64_t chunks = Chunks(n, options.chunk);
  if (bytes != 4 * chunks + RoundUp4((n * bits + 7) / 8))
    return Corrupt(CodecName(kind), "size differs");
  const uint8_t *packed = payload + 4 * chunks;
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t c = 0; c < chunks; ++c) {
    float scale;
    std::memcpy(&scale, payload + 4 * c, 4);
    const int64_t begin = c * options.chunk, end = std::min(n, begin + options.chunk);
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t q = (packed[(i * bits) / 8] >> ((i * bits) % 8)) & mask;
      sum[i] += kind == CodecKind::kOneBit ? (q ? -scale : scale) : TwoBitLevel(q, scale);
    }
  }
  return Status::Ok();
}

}  // namespace

const char *CodecName(CodecKind kind) {
  switch (kind) {
    case CodecKind::kTopK:
      return "topk";
    case CodecKind::kOneBit:
      return "1bit";
    case CodecKind::kTwoBit:
      return "2bit";
  }
  return "?";
}

int64_t TopKCount(double ratio, int64_t n) {
  return std::clamp<int64_t>(int64_t(std::ceil(ratio * double(n))), 1, std::max<int64_t>(1, n));
}

int64_t FixedPayloadBytes(const CodecOptions &options, int64_t n) {
  if (options.kind == CodecKind::kTopK)
    return options.huffman ? -1 : 8 * TopKCount(options.topk_ratio, n);
  return 4 * Chunks(n, options.chunk) + RoundUp4((n * BitsPerValue(options.kind) + 7) / 8);
}

int64_t MaxPayloadBytes(const CodecOptions &options, int64_t n) {
  if (options.kind != CodecKind::kTopK || !options.huffman) return FixedPayloadBytes(options, n);
  const int64_t k = TopKCount(options.topk_ratio, n);
  return 4 * k + kHuffmanHeader + RoundUp4((k * 63 + 7) / 8);  // 32 code + 31 raw bits at most
}

int64_t EncodeGradient(const CodecOptions &options, const float *value, int64_t n, uint8_t *payload,
                       float *decoded, uint32_t *order) {
  if (options.kind == CodecKind::kTopK)
    return EncodeTopK(options, value, n, payload, decoded, order);
  return EncodeQuantized(options, value, n, payload, decoded);
}

Status DecodeAddGradient(const CodecOptions &options, const uint8_t *payload, int64_t bytes,
                         int64_t n, float *sum) {
  if (options.kind == CodecKind::kTopK) return DecodeAddTopK(options, payload, bytes, n, sum);
  return DecodeAddQuantized(options, payload, bytes, n, sum);
}

}  // namespace dst
