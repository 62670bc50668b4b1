// Safetensors: the Hugging Face tensor file format (8-byte little-endian header
// length, a JSON header of {name: {dtype, shape, data_offsets}} plus an optional
// "__metadata__" string map, then the raw little-endian bytes). Files written
// here load with the `safetensors` Python package and torch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint/checksum.h"
#include "core/common/status.h"

namespace dst {

enum class TensorDType { kF32, kF16, kBF16, kI32, kI64, kU8 };

// Bytes per element of a dtype.
size_t DTypeSize(TensorDType dtype);
// "F32", "F16", "BF16", "I32", "I64", "U8".
const char *DTypeName(TensorDType dtype);

// A tensor to write: borrowed bytes, not owned.
struct TensorRef {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;  // empty = scalar
  const void *data = nullptr;  // numel(shape) * DTypeSize(dtype) bytes
};

// Allocates without zero-filling (the file's bytes overwrite them at once),
// which saves a pass over memory on every checkpoint load.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  template <typename U>
  void construct(U *p) noexcept {
    ::new (static_cast<void *>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U *p, Args &&...args) {
    ::new (static_cast<void *>(p)) U(std::forward<Args>(args)...);
  }
};

// A tensor read back: owns its bytes.
struct LoadedTensor {
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t, UninitializedAllocator<uint8_t>> bytes;
  int64_t numel() const;
  const float *f32() const { return reinterpret_cast<const float *>(bytes.data()); }
};

struct SafetensorsFile {
  std::map<std::string, LoadedTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// One tensor's place in a safetensors file, from its validated header.
struct SafetensorsEntry {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // its bytes in the data section
  int64_t numel() const;
};

// A safetensors file opened for reading tensors one at a time: the header
// is read and validated as ReadSafetensors does, a tensor's bytes only when
// asked for, so a process reads only the tensors it holds of a file larger
// than its memory (a sharded checkpoint of a 70B-class model).
class SafetensorsReader {
 public:
  // kIo for a missing or unreadable file; kCheckpoint naming the file and
  // the tensor for a corrupt header.
  static Result<SafetensorsReader> Open(const std::string &path);
  SafetensorsReader(SafetensorsReader &&other) noexcept;
  SafetensorsReader &operator=(SafetensorsReader &&other) noexcept;
  SafetensorsReader(const SafetensorsReader &) = delete;
  SafetensorsReader &operator=(const SafetensorsReader &) = delete;
  ~SafetensorsReader();

  const std::string &path() const { return path_; }
  // In the order of their bytes in the file.
  const std::vector<SafetensorsEntry> &entries() const { return entries_; }
  const std::map<std::string, std::string> &metadata() const { return metadata_; }
  // Null when the file has no tensor of that name.
  const SafetensorsEntry *Find(const std::string &name) const;
  // out[0, size) = bytes [offset, offset + size) of tensor `e`'s data (an
  // entry of this file). A file truncated since it was opened is
  // kCheckpoint naming it and the tensor; a failed read kIo.
  Status Read(const SafetensorsEntry &e, uint64_t offset, size_t size, void *out) const;

 private:
  SafetensorsReader() = default;
  int fd_ = -1;
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_start_ = 0;
};

// Writes `path` (tensors in the given order) and fsyncs it. Duplicate names,
// null data or a bad shape are kInvalidArgument; I/O failures kIo naming path.
// `sum`, when given, is fed every byte written (the file's checksum).
Status WriteSafetensors(const std::string &path, const std::vector<TensorRef> &tensors,
                        const std::map<std::string, std::string> &metadata = {},
                        Checksum64 *sum = nullptr);

// Reads and validates the whole file: header length within the file, JSON
// well formed, every dtype known, offsets contiguous and inside the data,
// sizes equal numel * dtype size. Errors are kCheckpoint naming the path and
// the offending tensor; a missing file is kIo.
// `sum`, when given, is fed every byte read, in file order (on success: the
// whole file).
Result<SafetensorsFile> ReadSafetensors(const std::string &path, Checksum64 *sum = nullptr);

}  // namespace dst
