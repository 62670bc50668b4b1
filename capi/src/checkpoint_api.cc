// Checkpoints on disk, without an engine: dst_checkpoint_inspect_json and
// dst_checkpoint_export_weights.
#include <string>

#include "capi/src/capi_util.h"
#include "core/checkpoint/inspect.h"

namespace {
thread_local std::string g_inspect_json;
}  // namespace

extern "C" dst_status_t dst_checkpoint_inspect_json(const char *dir, const char *tag,
                                                    const char **out_json) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(dir);
  DST_CAPI_REQUIRE_NONNULL(out_json);
  dst::Result<nlohmann::json> info = dst::InspectCheckpoint(dir, tag ? tag : "");
  if (!info.ok()) return dst::capi::FromStatus(info.status());
  g_inspect_json = info->dump(2);
  *out_json = g_inspect_json.c_str();
  return DST_OK;
  DST_CAPI_END
}

extern "C" dst_status_t dst_checkpoint_export_weights(const char *dir, const char *tag,
                                                      const char *out_path) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(dir);
  DST_CAPI_REQUIRE_NONNULL(out_path);
  return dst::capi::FromStatus(dst::ExportCheckpointWeights(dir, tag ? tag : "", out_path));
  DST_CAPI_END
}
