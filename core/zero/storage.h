// How a flat parameter or gradient buffer stores its values: fp32, or the
// bit patterns of fp16 / bf16. The sharding engine (data_parallel.h) and its
// parts (grad_partition.h, param_partition.h) are written once over this
// storage type; the layers always compute on fp32 (on the CPU), so 16-bit
// values are widened before a layer reads them and its fp32 gradients are
// rounded as they are added into 16-bit storage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/kernels/step_kernels.h"
#include "core/precision/half_ops.h"
#include "core/runtime/memory.h"

namespace dst {

enum class StorageType { kFp32, kFp16, kBf16 };

// The storage of a training dtype (fp32, fp16, bf16).
StorageType StorageOf(DType dtype);
inline size_t ElementBytes(StorageType t) {
  return t == StorageType::kFp32 ? 4 : 2;
}
// The 16-bit format of a 16-bit storage type (kFp16 for fp32, unused).
inline Half HalfOf(StorageType t) {
  return t == StorageType::kBf16 ? Half::kBf16 : Half::kFp16;
}

// A zeroed, 64-byte aligned flat buffer of `numel` elements of a storage
// type, charged to a memory category for its lifetime; in host memory or
// `memory`'s.
class FlatBuffer {
 public:
  FlatBuffer() = default;
  FlatBuffer(MemoryTracker *tracker, MemoryCategory category, StorageType type, int64_t numel,
             MemoryResource *memory = nullptr);

  StorageType type() const { return type_; }
  int64_t size() const { return numel_; }
  bool empty() const { return numel_ == 0; }
  // Element i's address.
  void *at(int64_t i) { return bytes_.data() + size_t(i) * ElementBytes(type_); }
  const void *at(int64_t i) const { return bytes_.data() + size_t(i) * ElementBytes(type_); }
  void zero() { bytes_.zero(); }

 private:
  StorageType type_ = StorageType::kFp32;
  int64_t numel_ = 0;
  Buffer<uint8_t> bytes_;
};

// dst[i] = float(src[i]).
void Widen(StorageType t, const void *src, float *dst, int64_t n);
// dst[i] = src[i] in the storage type (rounded to nearest even).
void Narrow(StorageType t, const float *src, void *dst, int64_t n);
// acc[i] += add[i], rounded to the storage type after the addition.
void AddInto(StorageType t, const float *add, void *acc, int64_t n);
// acc[i] += float(add[i]): a 16-bit reduction into fp32 gradients.
void AddWideInto(StorageType t, const void *add, float *acc, int64_t n);
// acc[i] += add[i], both of the storage type.
void SumInto(StorageType t, void *acc, const void *add, int64_t n);
// Sum of squares in double; not finite if an element is not.
double SumOfSquares(StorageType t, const void *x, int64_t n);

// The functions above over memory a StepPlacement holds (the host's, or a
// device's), computed by its step backend: what the partitions and the
// data-parallel layer call, so that one code path serves both. Upload and
// Download copy between the host and that memory.
class StorageOps {
 public:
  explicit StorageOps(StepPlacement placement = {}) : placement_(placement) {}
  const StepKernels &kernels() const { return placement_.step(); }
  MemoryResource *memory() const { return placement_.memory; }
  bool on_host() const { return placement_.on_host(); }
  WorkOrder *order() const { return placement_.order; }

  void Widen(StorageType t, const void *src, float *dst, int64_t n) const;
  void Narrow(StorageType t, const float *src, void *dst, int64_t n) const;
  void AddInto(StorageType t, const float *add, void *acc, int64_t n) const;
  void AddWideInto(StorageType t, const void *add, float *acc, int64_t n) const;
  void SumInto(StorageType t, void *acc, const void *add, int64_t n) const;
  double SumOfSquares(StorageType t, const void *x, int64_t n) const;
  // n elements of type t.
  void Copy(StorageType t, const void *src, void *dst, int64_t n) const;
  void ZeroFloats(float *x, int64_t n) const { kernels().ZeroRange(n, x); }
  void Upload(void *dst, const void *host, size_t bytes) const;
  void Download(void *host, const void *src, size_t bytes) const;
  // n elements of type t in the placement's memory, widened into host `out`.
  void WidenToHost(StorageType t, const void *src, float *out, int64_t n) const;
  // The kernels queued after this call see `work`'s result: the host waits
  // for it, or with the placement's WorkOrder (a device) the compute stream
  // does and a failure is named (in `what`) when the order drains.
  Status Await(std::unique_ptr<Work> work, const std::string &what) const;

 private:
  StepPlacement placement_;
};

// Collectives on data of a storage type: the fp32 or the 16-bit variant.
std::unique_ptr<Work> AllReduceSum(Communicator &comm, StorageType t, void *data, int64_t n);
std::unique_ptr<Work> ReduceSum(Communicator &comm, StorageType t, void *data, int64_t n,
                                int64_t root);
std::unique_ptr<Work> Broadcast(Communicator &comm, StorageType t, void *data, int64_t n,
                                int64_t root);
std::unique_ptr<Work> AllGather(Communicator &comm, StorageType t, void *data, int64_t shard);

// Waits for every work, returns the first error (all are waited for).
Status WaitAll(std::vector<std::unique_ptr<Work>> *works);

}  // namespace dst
