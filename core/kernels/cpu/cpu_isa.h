// The widest instruction set dstrain's CPU kernels may use: the CPU's own, or
// capped at AVX2 by DSTRAIN_CPU_ISA=avx2 — what an x86-64-v3 machine without
// AVX-512 runs (oneDNN's GEMMs, CPU-Adam's vector path, the bf16 compute
// choice all follow it), so that path is tested on any machine.
#pragma once

#include <string>

namespace dst::cpu {

enum class IsaCap { kNative, kAvx2 };

// The cap, read once; the first call also caps oneDNN (before its first use).
IsaCap CpuIsaCap();
const char *IsaCapName(IsaCap cap);
// The instruction set oneDNN's kernels use here, at the cap (e.g. "avx512_core_bf16").
const char *OneDnnIsa();
// Empty when DSTRAIN_CPU_ISA is unset or valid; else the error naming the values.
std::string CpuIsaCapError();

}  // namespace dst::cpu
