// Gradient compression codecs for the compressed reduction of ZeRO 0 and 1
// (grad_compression.h): each rank encodes its gradient plus its residual
// (error feedback), the payloads are all-gathered, and every rank decodes
// and sums them in rank order (so every rank holds the same sum).
//
//   top-k   the k = ceil(ratio x n) entries of largest magnitude: their
//           indices and fp32 values. With Huffman coding the ascending
//           indices travel as deltas: each delta's bit length is a symbol of
//           a canonical Huffman code built per payload (its 33 code lengths
//           travel in the header), followed by the delta's bits below its
//           leading one.
//   1-bit   per chunk of `chunk` elements: the mean magnitude as the
//           scale, one sign bit per element (decoded as +-scale).
//   2-bit   per chunk: the largest magnitude s, and per element the nearest
//           of the four levels -s, -s/3, s/3, s.
//
// Encoding also returns what the receivers will decode, so the residual
// (what was not sent) is exact: residual = value - decoded.
#pragma once

#include <cstdint>
#include <string>

#include "core/common/status.h"

namespace dst {

enum class CodecKind { kTopK, kOneBit, kTwoBit };

struct CodecOptions {
  CodecKind kind = CodecKind::kTopK;
  double topk_ratio = 0.01;  // (0, 1]
  bool huffman = false;      // top-k only
  int64_t warmup_steps = 0;  // optimizer steps reduced uncompressed first
  // Momentum correction: the value encoded is the rank's velocity
  // u = momentum u + (1 - dampening) g (plus the residual).
  bool momentum_correction = false;
  double momentum = 0.0, dampening = 0.0;
  int64_t chunk = 2048;  // 1-bit, 2-bit: elements per scale
};

inline constexpr int64_t kCodecChunk = 2048;  // the default chunk

// "topk", "1bit", "2bit".
const char *CodecName(CodecKind kind);

// Entries top-k keeps of n: ceil(ratio x n), at least 1 (n > 0).
int64_t TopKCount(double ratio, int64_t n);

// The payload size of n values when it does not depend on them (top-k
// without Huffman, 1-bit, 2-bit); -1 for Huffman-coded top-k. Always a
// multiple of 4 (payloads travel as fp32 words).
int64_t FixedPayloadBytes(const CodecOptions &options, int64_t n);
// An upper bound of any payload of n values (Huffman's worst case included).
int64_t MaxPayloadBytes(const CodecOptions &options, int64_t n);

// Encodes value[0, n) into payload (MaxPayloadBytes of room) and writes the
// decoded values into decoded[0, n) (value - decoded is the compression
// error); returns the payload's bytes (a multiple of 4). `order` is scratch
// of n entries (top-k).
int64_t EncodeGradient(const CodecOptions &options, const float *value, int64_t n, uint8_t *payload,
                       float *decoded, uint32_t *order);

// sum[0, n) += the values `payload` encodes. Errors name a payload that does
// not decode to n values (a corrupt or mismatched transfer).
Status DecodeAddGradient(const CodecOptions &options, const uint8_t *payload, int64_t bytes,
                         int64_t n, float *sum);

}  // namespace dst
