// Checkpoints on disk, without an engine: dst_checkpoint_inspect_json and
// dst_checkpoint_export_weights.
#include <string>

#include "capi/src/capi_util.h"
#include "core/checkpoint/inspect.h"
#include "core/engine/hf_export.h"

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

extern "C" dst_status_t dst_checkpoint_export_hf(const char *dir, const char *tag,
                                                 const char *out_dir, const char *dtype,
                                                 const char *max_shard_size) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(dir);
  DST_CAPI_REQUIRE_NONNULL(out_dir);
  dst::HfExportOptions options;
  if (dtype != nullptr) options.dtype = dtype;
  if (max_shard_size != nullptr) {
    dst::Result<int64_t> bytes = dst::ParseShardSize(max_shard_size);
    if (!bytes.ok()) return dst::capi::FromStatus(bytes.status());
    options.max_shard_bytes = bytes.value();
  }
  return dst::capi::FromStatus(
      dst::ExportHfCheckpoint(dir, tag ? tag : "", out_dir, options).context("exporting " +
                                                                             std::string(dir)));
  DST_CAPI_END
}
