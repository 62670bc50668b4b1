// CPU-Adam (ZeRO-Offload's optimizer on the host): one fused pass per range
// that scales the gradient (the loss scale's inverse times the clipping
// coefficient), applies the Adam/AdamW update to the fp32 master weights and
// their moments, and writes the updated weights' 16-bit copy (fp16 or bf16)
// in the same pass. Three paths chosen at run time by CPUID — AVX-512F,
// AVX2, scalar — with no -march=native build and no JIT; every path computes
// the same operations in the same order without fused multiply-adds, so they
// agree bit for bit (tested).
#pragma once

#include <cstdint>

#include "core/kernels/cpu/optimizers.h"
#include "core/kernels/elementwise_math.h"
#include "core/precision/half_ops.h"

namespace dst::cpu {

enum class SimdPath { kScalar, kAvx2, kAvx512 };

// The widest path this CPU runs (AVX-512F, else AVX2 with F16C, else scalar).
SimdPath BestSimdPath();
const char *SimdPathName(SimdPath path);

struct CpuAdamRange {
  float *param = nullptr;       // [n] fp32 master weights, updated
  const float *grad = nullptr;  // [n]
  float *exp_avg = nullptr;     // [n]
  float *exp_avg_sq = nullptr;  // [n]
  int64_t n = 0;
  float grad_mul = 1.0f;         // applied to the gradient first (unscale x clip)
  uint16_t *half_out = nullptr;  // [n] the updated weights in 16 bits, or null
  Half half = Half::kBf16;       // the format of half_out
};

// The step's float constants every path (and the CUDA kernel) uses.
math::AdamConstants AdamConstantsFor(const AdamHyper &h, float grad_mul);

// Updates the range on `path` (one thread; CpuAdamStep splits across threads).
void CpuAdamUpdate(const CpuAdamRange &r, const AdamHyper &h, SimdPath path);
// The same over the OpenMP threads, each on a contiguous part.
void CpuAdamStep(const CpuAdamRange &r, const AdamHyper &h, SimdPath path = BestSimdPath());

// 1-bit Adam's compressed phase in two halves over the OpenMP threads: the
// momentum alone from the gradient (m = b1 m + (1 - b1) g grad_mul; the
// variance frozen, the weights untouched), and, once the momentum has been
// exchanged, the weights from it (AdamApplyElement; half_out written).
void CpuAdamMomentum(const CpuAdamRange &r, const AdamHyper &h);
void CpuAdamApply(const CpuAdamRange &r, const AdamHyper &h);

// 0/1 Adam's element passes (zero_one_policy.h) over a range and its
// accumulator `acc` [n]; denom = sqrt(v) + eps, the 16-bit copy written:
//   kCapture: acc = g grad_mul (the gradient, to be exchanged)
//   kLocal:   m = b1 m + (1 - b1) g grad_mul; d = -lr (m / denom + wd p);
//             p += d; acc += d (the steps since the last synchronisation)
//   kSyncOut: p -= acc (back to the last synchronised weights); acc *= denom
//   kSyncIn:  m = -acc / lrs; p += acc / denom; acc = 0 (acc: the exchanged
//             mean; lrs: the learning rates summed over the local steps)
enum class ZeroOnePhase { kCapture, kLocal, kSyncOut, kSyncIn };
void CpuZeroOneUpdate(const CpuAdamRange &r, const AdamHyper &h, ZeroOnePhase phase, float *acc,
                      float lrs);

}  // namespace dst::cpu
