// The CUDA runtime calls of the device seam (core/device/cuda_seam.h),
// exported as one table (core/kernels/cuda/cuda_runtime_table.h) so that
// libdstrain.so reaches device memory, streams and events without linking
// CUDA. Each function sets its device first where it takes one.
#include <cuda_runtime.h>

#include <cstring>

#include "core/kernels/cuda/cuda_runtime_table.h"

static_assert(DST_CUDA_SUCCESS == cudaSuccess);
static_assert(DST_CUDA_OUT_OF_MEMORY == cudaErrorMemoryAllocation);
static_assert(DST_CUDA_NOT_READY == cudaErrorNotReady);
static_assert(DST_CUDA_HOST_TO_DEVICE == cudaMemcpyHostToDevice);
static_assert(DST_CUDA_DEVICE_TO_HOST == cudaMemcpyDeviceToHost);
static_assert(DST_CUDA_DEVICE_TO_DEVICE == cudaMemcpyDeviceToDevice);

namespace {

// A failed call's code goes back to the caller; the runtime also keeps it as
// the thread's last error, which the next kernel launch's check would read as
// its own (a stream asked of a missing device failed a later ScaleRange with
// "invalid argument"): clear it here. Sticky errors stay whatever is done.
int Reported(cudaError_t e) {
  if (e != cudaSuccess) cudaGetLastError();
  return e;
}

int DeviceCount(int *count) {
  return Reported(cudaGetDeviceCount(count));
}
int MemGetInfo(int device, size_t *free_bytes, size_t *total_bytes) {
  cudaError_t e = cudaSetDevice(device);
  return Reported(e != cudaSuccess ? e : cudaMemGetInfo(free_bytes, total_bytes));
}
int Malloc(int device, size_t bytes, void **ptr) {
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaMalloc(ptr, bytes);
  return Reported(e);  // an out-of-memory is not sticky either
}
int Free(int device, void *ptr) {
  cudaError_t e = cudaSetDevice(device);
  return Reported(e != cudaSuccess ? e : cudaFree(ptr));
}
int StreamCreate(int device, void **stream) {
  cudaError_t e = cudaSetDevice(device);
  return Reported(e != cudaSuccess
                      ? e
                      : cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t *>(stream),
                                                  cudaStreamNonBlocking));
}
int StreamDestroy(void *stream) {
  return Reported(cudaStreamDestroy(static_cast<cudaStream_t>(stream)));
}
int StreamSynchronize(void *stream) {
  return Reported(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}
int StreamWaitEvent(void *stream, void *event) {
  return Reported(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}
int EventCreate(int device, void **event) {
  cudaError_t e = cudaSetDevice(device);
  return Reported(e != cudaSuccess
                      ? e
                      : cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t *>(event),
                                                 cudaEventDisableTiming));
}
int EventDestroy(void *event) {
  return Reported(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}
int EventRecord(void *event, void *stream) {
  return Reported(
      cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}
int EventQuery(void *event) {
  return Reported(cudaEventQuery(static_cast<cudaEvent_t>(event)));
}
int EventSynchronize(void *event) {
  return Reported(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}
int MemcpyAsync(void *dst, const void *src, size_t bytes, int kind, void *stream) {
  return Reported(cudaMemcpyAsync(dst, src, bytes, static_cast<cudaMemcpyKind>(kind),
                                  static_cast<cudaStream_t>(stream)));
}
int MemsetAsync(void *dst, int value, size_t bytes, void *stream) {
  return Reported(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)));
}
const char *ErrorString(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}
int HostAlloc(size_t bytes, void **ptr) {
  const cudaError_t e = cudaHostAlloc(ptr, bytes, cudaHostAllocPortable);
  return Reported(e);
}
int HostFree(void *ptr) {
  return Reported(cudaFreeHost(ptr));
}

}  // namespace

// Fills the caller's table up to its size (a caller built against an older,
// shorter table gets what it knows of); returns 0.
extern "C" __attribute__((visibility("default"))) int dst_cuda_plugin_runtime(
    DstCudaRuntimeTable *table) {
  DstCudaRuntimeTable mine{};
  mine.size = sizeof mine;
  mine.device_count = DeviceCount;
  mine.mem_get_info = MemGetInfo;
  mine.malloc = Malloc;
  mine.free = Free;
  mine.stream_create = StreamCreate;
  mine.stream_destroy = StreamDestroy;
  mine.stream_synchronize = StreamSynchronize;
  mine.stream_wait_event = StreamWaitEvent;
  mine.event_create = EventCreate;
  mine.event_destroy = EventDestroy;
  mine.event_record = EventRecord;
  mine.event_query = EventQuery;
  mine.event_synchronize = EventSynchronize;
  mine.memcpy_async = MemcpyAsync;
  mine.memset_async = MemsetAsync;
  mine.error_string = ErrorString;
  mine.host_alloc = HostAlloc;
  mine.host_free = HostFree;
  const size_t asked = table->size < sizeof mine ? table->size : sizeof mine;
  std::memcpy(table, &mine, asked);
  table->size = asked;
  return 0;
}
