// Shared plumbing of the C ABI: thread-local last error, Status -> dst_status_t,
// and a guard that keeps C++ exceptions from crossing the boundary.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "capi/include/dstrain/dstrain.h"
#include "core/common/status.h"

namespace dst::capi {

// Records `message` as this thread's last error and returns `status`.
dst_status_t Fail(dst_status_t status, const std::string &message);

// Maps a Status onto the C status; records the message when not ok.
dst_status_t FromStatus(const Status &status);

// "<function>: out of memory: <what was asked for>; <the fix>" — the detail
// when `error` is an AllocationError, the fix always.
std::string OutOfMemoryMessage(const char *function, const std::bad_alloc &error);

// Clears the last error (successful calls leave it untouched, like errno).
inline dst_status_t Ok() {
  return DST_OK;
}

}  // namespace dst::capi

// Wraps a C ABI function body: any escaping exception becomes an error status.
#define DST_CAPI_BEGIN try {
#define DST_CAPI_END                                                                            \
  }                                                                                             \
  catch (const std::bad_alloc &e) {                                                             \
    return ::dst::capi::Fail(DST_ERR_OUT_OF_MEMORY, ::dst::capi::OutOfMemoryMessage(__func__, e)); \
  }                                                                                             \
  catch (const std::exception &e) {                                                             \
    return ::dst::capi::Fail(DST_ERR_INTERNAL,                                                  \
                             std::string(__func__) + ": unexpected error: " + e.what());        \
  }                                                                                             \
  catch (...) {                                                                                 \
    return ::dst::capi::Fail(DST_ERR_INTERNAL,                                                  \
                             std::string(__func__) + ": unexpected unknown error");             \
  }

// Returns DST_ERR_INVALID_ARGUMENT naming the parameter when `ptr` is NULL.
#define DST_CAPI_REQUIRE_NONNULL(ptr)                                                            \
  do {                                                                                           \
    if ((ptr) == nullptr)                                                                        \
      return ::dst::capi::Fail(DST_ERR_INVALID_ARGUMENT, std::string(__func__) +                 \
                                                             ": argument '" #ptr                 \
                                                             "' is NULL; pass a valid pointer"); \
  } while (0)
