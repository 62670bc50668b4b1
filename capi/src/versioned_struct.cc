// Messages for the struct_size rules (versioned_struct.h).
#include "capi/src/versioned_struct.h"

#include <string>

#include "capi/src/capi_util.h"

namespace dst::capi {

dst_status_t CheckStructSize(const char *call, const char *arg, const char *type, size_t size,
                             size_t v1_size, size_t library_size, const char *hint) {
  if (size >= v1_size && size <= DST_STRUCT_SIZE_MAX) return DST_OK;
  return Fail(DST_ERR_INVALID_ARGUMENT,
              std::string(call) + ": " + arg + "->struct_size is " + std::to_string(size) +
                  ", but " + type + " takes " + std::to_string(v1_size) +
                  " (its first version) to " + std::to_string(DST_STRUCT_SIZE_MAX) +
                  " bytes (this library's is " + std::to_string(library_size) + "): " + hint);
}

}  // namespace dst::capi
