#include "core/kernels/cpu/cpu_isa.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <string>

namespace dst::cpu {

namespace {

// DSTRAIN_CPU_ISA: unset / "native" or "avx2"; `valid` false for anything else.
IsaCap CapFromEnv(bool *valid) {
  *valid = true;
  const char *text = std::getenv("DSTRAIN_CPU_ISA");
  const std::string value = text != nullptr ? text : "";
  if (value == "avx2") return IsaCap::kAvx2;
  *valid = value.empty() || value == "native";
  return IsaCap::kNative;
}

}  // namespace

const char *OneDnnIsa() {
  CpuIsaCap();
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx512_mic:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    default:
      return "generic";
  }
}

IsaCap CpuIsaCap() {
  static const IsaCap cap = [] {
    bool valid = true;
    const IsaCap c = CapFromEnv(&valid);
    if (c == IsaCap::kAvx2) dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2);
    return c;
  }();
  return cap;
}

const char *IsaCapName(IsaCap cap) {
  return cap == IsaCap::kAvx2 ? "avx2 (DSTRAIN_CPU_ISA)" : "native";
}

std::string CpuIsaCapError() {
  bool valid = true;
  CapFromEnv(&valid);
  if (valid) return "";
  return std::string("DSTRAIN_CPU_ISA=\"") + std::getenv("DSTRAIN_CPU_ISA") +
         "\" is not an instruction-set cap: use \"avx2\" (x86-64-v3 kernels only) or \"native\" "
         "(the default)";
}

}  // namespace dst::cpu
