// dst_build_info_json: what this libdstrain was built with and what it sees.
#include <cblas.h>
#include <omp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "capi/src/capi_util.h"
#include "core/common/test_hooks.h"
#include "core/data/text_dataset.h"
#include "core/kernels/cpu/cpu_adam.h"
#include "core/kernels/cpu/cpu_isa.h"
#include "core/kernels/cpu/gemm.h"
#include "core/kernels/cpu/vector_math.h"
#include "core/offload/async_file.h"
#include "core/runtime/plugin.h"
#include "core/device/cuda_devices.h"
#include "core/device/cuda_kernels.h"

#ifndef DSTRAIN_BUILD_TYPE
#define DSTRAIN_BUILD_TYPE "unknown"
#endif
#ifndef DSTRAIN_CXX_COMPILER
#define DSTRAIN_CXX_COMPILER "unknown"
#endif
#ifndef DSTRAIN_HAVE_CUDA
#define DSTRAIN_HAVE_CUDA 0
#endif
#ifndef DSTRAIN_HAVE_NCCL
#define DSTRAIN_HAVE_NCCL 0
#endif
#ifndef DSTRAIN_CUDA_TOOLKIT_FOUND
#define DSTRAIN_CUDA_TOOLKIT_FOUND 0
#endif

namespace {

using json = nlohmann::ordered_json;

#if defined(__x86_64__) || defined(__i386__)
// CPUID leaf 1, ECX bit 29 (clang before 16 has no "f16c" for __builtin_cpu_supports).
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}
#endif

json CpuFeatures() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return {{"avx2", __builtin_cpu_supports("avx2") != 0},
          {"fma", __builtin_cpu_supports("fma") != 0},
          {"f16c", CpuHasF16c()},
          {"avx512f", __builtin_cpu_supports("avx512f") != 0}};
#else
  return json::object();
#endif
}

const char *CompiledFor() {
#if defined(__AVX2__)
  return "x86-64-v3 (AVX2+FMA+F16C)";
#elif defined(__x86_64__)
  return "x86-64 (baseline)";
#else
  return "generic";
#endif
}

json CpuInfo() {
  return {{"cores", std::thread::hardware_concurrency()},
          {"isa_cap", dst::cpu::IsaCapName(dst::cpu::CpuIsaCap())},
          {"features", CpuFeatures()},
          {"compiled_for", CompiledFor()}};
}

std::string OrEmpty(const char *text) {
  return text != nullptr ? text : "";
}

json BlasInfo() {
  return {{"library", "OpenBLAS"},
          {"config", OrEmpty(openblas_get_config())},
          {"core", OrEmpty(openblas_get_corename())},
          {"threads", openblas_get_num_threads()},
          {"parallel", openblas_get_parallel()}};  // 0 sequential, 1 pthreads, 2 OpenMP
}

// The fp32 GEMM backend, what it runs here, and OpenBLAS's own state.
json GemmInfo() {
  using namespace dst::cpu;
  const GemmBackend active = ActiveGemmBackend();
  return {{"backend", GemmBackendName(active)},
          {"target", GemmBackendTarget(active)},
          {"chosen_by", std::getenv("DSTRAIN_GEMM") ? "DSTRAIN_GEMM" : "default"},
          {"openblas_note", OpenBlasGenericCoreNote()},
          {"bf16_compute", Bf16Compute().enabled ? "bf16" : "fp32"},
          {"bf16_compute_reason",
           Bf16Compute().error.empty() ? Bf16Compute().reason : Bf16Compute().error},
          {"elementwise", Avx512Elementwise() ? "avx512" : "avx2"}};
}

json OpenMpInfo() {
  return {{"max_threads", omp_get_max_threads()}};
}

// The CUDA kernel backend the layers and the step run through on a device
// (dstrain.device "cuda"): whether the plugin's kernel table loads complete
// (no device needed), or why not.
std::string KernelBackendInfo() {
  const dst::Status table = dst::CudaKernels::CheckPlugin();
  if (!table.ok()) return "not available: " + table.message();
  return "the plugin's kernel table is complete; dstrain.device \"cuda\" trains at ZeRO "
         "0-3 in fp32/fp16/bf16, dp/tp/pp, offload_optimizer (multi-GPU: compiled, never run)";
}

json CudaInfo() {
  const bool compiled = DSTRAIN_HAVE_CUDA != 0;
  const dst::CudaDevices &seen = dst::QueryCudaDevices();
  return {{"compiled", compiled},
          {"nccl", DSTRAIN_HAVE_NCCL != 0},
          {"toolkit_found_at_build", DSTRAIN_CUDA_TOOLKIT_FOUND != 0},
          {"devices", seen.devices},
          {"runtime_version", seen.runtime_version},
          {"driver_version", seen.driver_version},
          {"why_no_device", seen.why_none},
          {"kernel_backend", KernelBackendInfo()}};
}

json DefaultCorpusInfo() {
  const std::string dir = dst::DefaultCorpusDir();
  const size_t files = dst::ListCorpusFiles(dir).size();
  return {{"dir", dir}, {"exists", files > 0}, {"files", files}};
}

// The NVMe tier's I/O engine (io_uring, or why not and the fallback) and
// the optimizer's vector path.
json OffloadInfo() {
  const std::string refused = dst::IoUringUnavailableReason();
  return {{"io_engine", refused.empty() ? "io_uring" : "pread/pwrite"},
          {"io_uring_refused", refused},
          {"cpu_adam", dst::cpu::SimdPathName(dst::cpu::BestSimdPath())}};
}

// Where this library is and where it finds its plugins (none opened).
json FilesInfo() {
  json plugins = json::array();
  for (const dst::PluginLocation &p : dst::LocatePlugins())
    plugins.push_back({{"name", p.name}, {"file", p.file_name}, {"path", p.path}, {"built", p.built}});
  return {{"library", dst::ThisModulePath()}, {"plugins", plugins}};
}

std::string BuildInfoJson() {
  const json info = {{"version", dst_version()},
                     {"compiler", DSTRAIN_CXX_COMPILER},
                     {"build_type", DSTRAIN_BUILD_TYPE},
                     {"cpu", CpuInfo()},
                     {"blas", BlasInfo()},
                     {"gemm", GemmInfo()},
                     {"openmp", OpenMpInfo()},
                     {"cuda", CudaInfo()},
                     {"offload", OffloadInfo()},
                     {"default_corpus", DefaultCorpusInfo()},
                     {"files", FilesInfo()},
                     // DSTRAIN_TEST_HOOKS: whether test and fault-injection hooks are compiled in.
                     {"test_hooks", DSTRAIN_TEST_HOOKS != 0}};
  return info.dump(2);
}

}  // namespace

extern "C" {

dst_status_t dst_build_info_json(const char **out_json) {
  DST_CAPI_BEGIN
  DST_CAPI_REQUIRE_NONNULL(out_json);
  static const std::string kBuildInfo = BuildInfoJson();
  *out_json = kBuildInfo.c_str();
  return DST_OK;
  DST_CAPI_END
}

}  // extern "C"
