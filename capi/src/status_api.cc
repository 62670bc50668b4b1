// Status strings, last error and version: the parts of the C ABI that take no handle.
#include <cstring>
#include <string>

#include "capi/src/capi_util.h"
#include "core/runtime/memory.h"

namespace {
thread_local std::string g_last_error;
}

namespace dst::capi {

dst_status_t Fail(dst_status_t status, const std::string &message) {
  g_last_error = message;
  return status;
}

std::string OutOfMemoryMessage(const char *function, const std::bad_alloc &error) {
  std::string message = std::string(function) + ": out of memory";
  if (const auto *detail = dynamic_cast<const AllocationError *>(&error))
    message += ": " + std::string(detail->what());
  return message +
         ". `dstrain estimate` gives this layout's bytes per rank; ZeRO stage 3, CPU/NVMe "
         "offload, activation checkpointing, a smaller micro-batch or more ranks lower them";
}

// FromStatus converts a Code to a dst_status_t by value: every code must equal
// its C status, so reordering or renumbering either enum breaks the build.
#define DST_SAME_STATUS(code, c_status)                                     \
  static_assert(static_cast<int>(Code::code) == static_cast<int>(c_status), \
                "dst::Code::" #code " must equal " #c_status                \
                " (core/common/status.h "                                   \
                "and dstrain.h)")
DST_SAME_STATUS(kOk, DST_OK);
DST_SAME_STATUS(kInvalidArgument, DST_ERR_INVALID_ARGUMENT);
DST_SAME_STATUS(kConfig, DST_ERR_CONFIG);
DST_SAME_STATUS(kNotSupported, DST_ERR_NOT_SUPPORTED);
DST_SAME_STATUS(kIo, DST_ERR_IO);
DST_SAME_STATUS(kCheckpoint, DST_ERR_CHECKPOINT);
DST_SAME_STATUS(kState, DST_ERR_STATE);
DST_SAME_STATUS(kOutOfMemory, DST_ERR_OUT_OF_MEMORY);
DST_SAME_STATUS(kComm, DST_ERR_COMM);
DST_SAME_STATUS(kNumeric, DST_ERR_NUMERIC);
DST_SAME_STATUS(kInternal, DST_ERR_INTERNAL);
DST_SAME_STATUS(kAborted, DST_ERR_ABORTED);
#undef DST_SAME_STATUS

dst_status_t FromStatus(const Status &status) {
  if (status.ok()) return DST_OK;
  return Fail(static_cast<dst_status_t>(status.code()), status.message());
}

}  // namespace dst::capi

extern "C" {

const char *dst_status_string(dst_status_t status) {
  // A C caller may pass any int: its bytes are read as one (reading a value
  // outside the enum's as the enum would be undefined in C++).
  static_assert(sizeof(dst_status_t) == sizeof(int));
  int value = 0;
  std::memcpy(&value, &status, sizeof value);
  switch (value) {
    case DST_OK:
      return "ok";
    case DST_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case DST_ERR_CONFIG:
      return "configuration error";
    case DST_ERR_NOT_SUPPORTED:
      return "not supported yet";
    case DST_ERR_IO:
      return "I/O error";
    case DST_ERR_CHECKPOINT:
      return "checkpoint error";
    case DST_ERR_STATE:
      return "call out of order";
    case DST_ERR_OUT_OF_MEMORY:
      return "out of memory";
    case DST_ERR_COMM:
      return "communication error";
    case DST_ERR_NUMERIC:
      return "numerical error";
    case DST_ERR_INTERNAL:
      return "internal error";
    case DST_ERR_ABORTED:
      return "aborted";
  }
  return "unknown status";
}

const char *dst_last_error(void) {
  return g_last_error.c_str();
}

const char *dst_version(void) {
  return DST_VERSION_STRING;
}

int dst_version_number(void) {
  return DST_VERSION_NUMBER;
}

}  // extern "C"
