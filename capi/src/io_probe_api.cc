// dst_io_probe_json: the file system's bandwidth through the NVMe tier's I/O.
#include <string>

#include "capi/src/capi_util.h"
#include "core/offload/io_probe.h"

namespace {
thread_local std::string g_probe_json;
}  // namespace

extern "C" dst_status_t dst_io_probe_json(const char *dir, int64_t file_bytes,
                                          const char **out_json) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(dir);
  DST_CAPI_REQUIRE_NONNULL(out_json);
  if (file_bytes < 0)
    return dst::capi::FromStatus(dst::InvalidArgument("dst_io_probe_json: file_bytes " +
                                                      std::to_string(file_bytes) + " is negative"));
  dst::IoProbeOptions options;
  if (file_bytes > 0) options.file_bytes = file_bytes;
  dst::Result<dst::IoProbeReport> report = dst::ProbeIo(dir, options);
  if (!report.ok()) return dst::capi::FromStatus(report.status());
  g_probe_json = dst::IoProbeJson(report.value());
  *out_json = g_probe_json.c_str();
  return DST_OK;
  DST_CAPI_END
}
