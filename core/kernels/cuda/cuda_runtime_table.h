/* The CUDA runtime calls the device seam needs, as the CUDA plugin
 * (libdstrain_cuda.so, core/kernels/cuda/runtime.cu) exports them: a table of
 * plain C function pointers filled by dst_cuda_plugin_runtime(), so that
 * libdstrain.so itself never links CUDA. Handles are opaque (cudaStream_t,
 * cudaEvent_t); every call returns CUDA's own cudaError_t value as an int
 * (0 success), named by error_string. The table grows at the end only. */
#ifndef DSTRAIN_CORE_RUNTIME_CUDA_RUNTIME_TABLE_H_
#define DSTRAIN_CORE_RUNTIME_CUDA_RUNTIME_TABLE_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cudaError_t values the host side acts on (the plugin checks they match). */
#define DST_CUDA_SUCCESS 0
#define DST_CUDA_OUT_OF_MEMORY 2 /* cudaErrorMemoryAllocation */
#define DST_CUDA_NOT_READY 600   /* cudaErrorNotReady */

/* memcpy kinds (cudaMemcpyKind's values). */
#define DST_CUDA_HOST_TO_DEVICE 1
#define DST_CUDA_DEVICE_TO_HOST 2
#define DST_CUDA_DEVICE_TO_DEVICE 3

typedef struct DstCudaRuntimeTable {
  size_t size; /* sizeof the table the plugin filled (a newer caller reads no further) */
  int (*device_count)(int *count);
  int (*mem_get_info)(int device, size_t *free_bytes, size_t *total_bytes);
  int (*malloc)(int device, size_t bytes, void **ptr);
  int (*free)(int device, void *ptr);
  int (*stream_create)(int device, void **stream); /* a non-blocking stream */
  int (*stream_destroy)(void *stream);
  int (*stream_synchronize)(void *stream);
  int (*stream_wait_event)(void *stream, void *event);
  int (*event_create)(int device, void **event); /* without timing */
  int (*event_destroy)(void *event);
  int (*event_record)(void *event, void *stream);
  int (*event_query)(void *event); /* DST_CUDA_SUCCESS done, DST_CUDA_NOT_READY pending */
  int (*event_synchronize)(void *event);
  int (*memcpy_async)(void *dst, const void *src, size_t bytes, int kind, void *stream);
  int (*memset_async)(void *dst, int value, size_t bytes, void *stream);
  const char *(*error_string)(int code);
  /* Page-locked host memory (cudaHostAlloc, portable): what async copies
   * overlap with compute from, and what ZeRO-Offload keeps its state in. */
  int (*host_alloc)(size_t bytes, void **ptr);
  int (*host_free)(void *ptr);
} DstCudaRuntimeTable;

/* Fills *table (table->size set by the caller to sizeof its table); returns 0. */
typedef int (*DstCudaRuntimeFn)(DstCudaRuntimeTable *table);

#ifdef __cplusplus
}
#endif

#endif /* DSTRAIN_CORE_RUNTIME_CUDA_RUNTIME_TABLE_H_ */
