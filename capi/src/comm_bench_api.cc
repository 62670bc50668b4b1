// dst_comm_bench_json: the job's collectives measured as nccl-tests does.
#include <string>

#include "capi/src/capi_util.h"
#include "core/engine/comm_bench_job.h"

namespace {
thread_local std::string g_bench_json;
}  // namespace

extern "C" dst_status_t dst_comm_bench_json(const char *config_json, const char *request_json,
                                            const char **out_json) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(out_json);
  dst::Result<std::string> report =
      dst::RunCommBenchJob(config_json ? config_json : "", request_json ? request_json : "");
  if (!report.ok()) return dst::capi::FromStatus(report.status());
  g_bench_json = std::move(report).value();
  *out_json = g_bench_json.c_str();
  return DST_OK;
  DST_CAPI_END
}
