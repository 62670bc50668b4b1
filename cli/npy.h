// A reader for NumPy .npy files (format versions 1-3): the arrays `dstrain
// train` takes as a sequential model's inputs and labels. Little-endian
// float32 / int32 / int64 in C order; anything else is an error that names
// the file and what it holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dstrain_cli {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> f32;     // descr '<f4'
  std::vector<int64_t> ints;  // descr '<i4' or '<i8'
  bool is_float() const { return !f32.empty() || ints.empty(); }
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t row_size() const;
};

// Reads `path`; a usage error (exit 2) names the problem.
NpyArray ReadNpy(const std::string &path);

// Fills `a`'s values (its shape set) from little-endian bytes: float32 when
// `is_float`, else int32 (width 4) or int64 (width 8).
void FillArray(NpyArray *a, const std::vector<char> &raw, bool is_float, size_t width);

}  // namespace dstrain_cli
