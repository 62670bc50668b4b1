#include "core/zero/storage.h"

#include <cstring>
#include <vector>

#include "core/comm/work_order.h"
#include "core/kernels/cpu/reduce.h"

namespace dst {

StorageType StorageOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return StorageType::kFp16;
    case DType::kBFloat16:
      return StorageType::kBf16;
    default:
      return StorageType::kFp32;
  }
}

FlatBuffer::FlatBuffer(MemoryTracker *tracker, MemoryCategory category, StorageType type,
                       int64_t numel, MemoryResource *memory)
    : type_(type),
      numel_(numel),
      bytes_(tracker, category, size_t(numel) * ElementBytes(type), memory) {}

void Widen(StorageType t, const void *src, float *dst, int64_t n) {
  if (t == StorageType::kFp32)
    std::memcpy(dst, src, size_t(n) * sizeof(float));
  else
    ToFloat(HalfOf(t), static_cast<const uint16_t *>(src), dst, n);
}

void Narrow(StorageType t, const float *src, void *dst, int64_t n) {
  if (t == StorageType::kFp32)
    std::memcpy(dst, src, size_t(n) * sizeof(float));
  else
    FromFloat(HalfOf(t), src, static_cast<uint16_t *>(dst), n);
}

void AddInto(StorageType t, const float *add, void *acc, int64_t n) {
  if (t == StorageType::kFp32) {
    float *a = static_cast<float *>(acc);
    for (int64_t i = 0; i < n; ++i) a[i] += add[i];
  } else {
    AccumulateInto(HalfOf(t), add, static_cast<uint16_t *>(acc), n);
  }
}

void AddWideInto(StorageType t, const void *add, float *acc, int64_t n) {
  constexpr int64_t kChunk = 4096;
  float wide[kChunk];
  const auto *src = static_cast<const uint8_t *>(add);
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t m = std::min(kChunk, n - c);
    Widen(t, src + size_t(c) * ElementBytes(t), wide, m);
    for (int64_t i = 0; i < m; ++i) acc[c + i] += wide[i];
  }
}

void SumInto(StorageType t, void *acc, const void *add, int64_t n) {
  if (t == StorageType::kFp32)
    AddInto(t, static_cast<const float *>(add), acc, n);
  else
    Sum16(HalfOf(t), static_cast<uint16_t *>(acc), static_cast<const uint16_t *>(add), n);
}

double SumOfSquares(StorageType t, const void *x, int64_t n) {
  if (t == StorageType::kFp32) return cpu::SumOfSquares(static_cast<const float *>(x), n);
  return SumOfSquares16(HalfOf(t), static_cast<const uint16_t *>(x), n);
}

namespace {
uint16_t *Bits(void *p) {
  return static_cast<uint16_t *>(p);
}
const uint16_t *Bits(const void *p) {
  return static_cast<const uint16_t *>(p);
}
}  // namespace

void StorageOps::Widen(StorageType t, const void *src, float *dst, int64_t n) const {
  if (t == StorageType::kFp32)
    kernels().CopyRange(static_cast<const float *>(src), n, dst);
  else
    kernels().Widen16(HalfOf(t), Bits(src), n, dst);
}

void StorageOps::Narrow(StorageType t, const float *src, void *dst, int64_t n) const {
  if (t == StorageType::kFp32)
    kernels().CopyRange(src, n, static_cast<float *>(dst));
  else
    kernels().Narrow16(HalfOf(t), src, n, Bits(dst));
}

void StorageOps::AddInto(StorageType t, const float *add, void *acc, int64_t n) const {
  if (t == StorageType::kFp32)
    kernels().AddRange(add, n, static_cast<float *>(acc));
  else
    kernels().AddInto16(HalfOf(t), add, n, Bits(acc));
}

void StorageOps::AddWideInto(StorageType t, const void *add, float *acc, int64_t n) const {
  if (t == StorageType::kFp32)
    kernels().AddRange(static_cast<const float *>(add), n, acc);
  else
    kernels().AddWide16(HalfOf(t), Bits(add), n, acc);
}

void StorageOps::SumInto(StorageType t, void *acc, const void *add, int64_t n) const {
  if (t == StorageType::kFp32)
    kernels().AddRange(static_cast<const float *>(add), n, static_cast<float *>(acc));
  else
    kernels().Sum16(HalfOf(t), Bits(add), n, Bits(acc));
}

double StorageOps::SumOfSquares(StorageType t, const void *x, int64_t n) const {
  if (t == StorageType::kFp32) return kernels().SumOfSquaresRange(static_cast<const float *>(x), n);
  return kernels().SumOfSquares16(HalfOf(t), Bits(x), n);
}

void StorageOps::Copy(StorageType t, const void *src, void *dst, int64_t n) const {
  kernels().CopyBytes(src, size_t(n) * ElementBytes(t), dst);
}

void StorageOps::WidenToHost(StorageType t, const void *src, float *out, int64_t n) const {
  if (on_host()) return dst::Widen(t, src, out, n);
  if (t == StorageType::kFp32) return Download(out, src, size_t(n) * sizeof(float));
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  Download(bits.data(), src, bits.size() * sizeof(uint16_t));
  dst::Widen(t, bits.data(), out, n);
}

void StorageOps::Upload(void *dst, const void *host, size_t bytes) const {
  if (memory())
    memory()->Upload(dst, host, bytes);
  else
    std::memcpy(dst, host, bytes);
}

void StorageOps::Download(void *host, const void *src, size_t bytes) const {
  if (memory())
    memory()->Download(host, src, bytes);
  else
    std::memcpy(host, src, bytes);
}

std::unique_ptr<Work> AllReduceSum(Communicator &comm, StorageType t, void *data, int64_t n) {
  if (t == StorageType::kFp32) return comm.AllReduceSum(static_cast<float *>(data), n);
  return comm.AllReduceSum16(static_cast<uint16_t *>(data), n, HalfOf(t));
}

std::unique_ptr<Work> ReduceSum(Communicator &comm, StorageType t, void *data, int64_t n,
                                int64_t root) {
  if (t == StorageType::kFp32) return comm.ReduceSum(static_cast<float *>(data), n, root);
  return comm.ReduceSum16(static_cast<uint16_t *>(data), n, root, HalfOf(t));
}

std::unique_ptr<Work> Broadcast(Communicator &comm, StorageType t, void *data, int64_t n,
                                int64_t root) {
  if (t == StorageType::kFp32) return comm.Broadcast(static_cast<float *>(data), n, root);
  return comm.Broadcast16(static_cast<uint16_t *>(data), n, root);
}

std::unique_ptr<Work> AllGather(Communicator &comm, StorageType t, void *data, int64_t shard) {
  if (t == StorageType::kFp32) return comm.AllGather(static_cast<float *>(data), shard);
  return comm.AllGather16(static_cast<uint16_t *>(data), shard);
}

Status StorageOps::Await(std::unique_ptr<Work> work, const std::string &what) const {
  if (!work) return Status::Ok();
  if (order() != nullptr) return order()->After(std::move(work), what);
  return work->Wait();
}

Status WaitAll(std::vector<std::unique_ptr<Work>> *works) {
  Status first;
  for (auto &work : *works) {
    Status st = work->Wait();
    if (!st.ok() && first.ok()) first = std::move(st);
  }
  works->clear();
  return first;
}

}  // namespace dst
