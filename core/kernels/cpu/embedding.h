// Token + learned position embeddings (GPT-2).
#pragma once

#include <cstdint>
#include <limits>

namespace dst::cpu {

// tokens: [B, T] in [0, V); wte: [V, C]; wpe: [maxT, C]; out: [B, T, C].
template <typename T>
void EmbeddingForward(const int32_t *tokens, const T *wte, const T *wpe, int64_t B, int64_t Tn,
                      int64_t C, T *out) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * Tn; ++bt) {
    const T *te = wte + int64_t(tokens[bt]) * C;
    const T *pe = wpe + (bt % Tn) * C;
    T *o = out + bt * C;
    for (int64_t i = 0; i < C; ++i) o[i] = te[i] + pe[i];
  }
}

// A vocabulary-parallel rank's part: out[b, t] = wte[token - first] for
// tokens in [first, first + rows), zeros otherwise (the ranks' parts are then
// summed; positions are added after that, once).
template <typename T>
void EmbeddingLookupRange(const int32_t *tokens, const T *wte, int64_t first, int64_t rows,
                          int64_t B, int64_t Tn, int64_t C, T *out) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * Tn; ++bt) {
    const int64_t row = int64_t(tokens[bt]) - first;
    T *o = out + bt * C;
    if (row < 0 || row >= rows) {
      for (int64_t i = 0; i < C; ++i) o[i] = T(0);
      continue;
    }
    const T *te = wte + row * C;
    for (int64_t i = 0; i < C; ++i) o[i] = te[i];
  }
}

// out[r] += wpe[(first_row + r) % Tn] for `rows` rows of a [B, T, C] tensor
// starting at row first_row (a sequence-parallel rank's rows).
template <typename T>
void AddPositionsToRows(const T *wpe, int64_t first_row, int64_t rows, int64_t Tn, int64_t C,
                        T *out) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T *pe = wpe + ((first_row + r) % Tn) * C;
    T *o = out + r * C;
    for (int64_t i = 0; i < C; ++i) o[i] += pe[i];
  }
}

// out[b, t] += wpe[t].
template <typename T>
void AddPositions(const T *wpe, int64_t B, int64_t Tn, int64_t C, T *out) {
  AddPositionsToRows(wpe, 0, B * Tn, Tn, C, out);
}

// dwte, dwpe (+=). Serial over rows: tokens repeat, and the scatter is cheap
// next to the GEMMs; parallel over feature blocks keeps it race-free. A
// vocabulary-parallel rank holds wte rows [first, first + rows) only: other
// tokens add to dwpe alone. dwpe may be null (no learned positions).
template <typename T>
void EmbeddingBackward(const T *dout, const int32_t *tokens, int64_t B, int64_t Tn, int64_t C,
                       T *dwte, T *dwpe, int64_t first = 0,
                       int64_t rows = std::numeric_limits<int64_t>::max()) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kBlock, i1 = (i0 + kBlock < C) ? i0 + kBlock : C;
    for (int64_t bt = 0; bt < B * Tn; ++bt) {
      const T *g = dout + bt * C;
      const int64_t row = int64_t(tokens[bt]) - first;
      if (dwpe != nullptr) {
        T *pe = dwpe + (bt % Tn) * C;
        for (int64_t i = i0; i < i1; ++i) pe[i] += g[i];
      }
      if (row < 0 || row >= rows) continue;
      T *te = dwte + row * C;
      for (int64_t i = i0; i < i1; ++i) te[i] += g[i];
    }
  }
}

}  // namespace dst::cpu
