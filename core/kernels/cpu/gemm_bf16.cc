// bf16 compute for fp32 GEMMs (ComputeType::kBf16) and the per-CPU choice of
// whether bf16 training uses it.
#include <cpuid.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <tuple>
#include <vector>

#include "core/kernels/cpu/cpu_isa.h"
#include "core/kernels/cpu/gemm.h"
#include "core/precision/convert.h"

namespace dst::cpu {

namespace {

using Dims = dnnl::memory::dims;
using DataType = dnnl::memory::data_type;

// A GEMM's shape as oneDNN sees it: strides of the dense bf16 copies follow
// from the transposes, C's row stride is the caller's.
struct MatmulKey {
  int m, n, k;
  bool trans_a, trans_b;
  int ldc;
  float alpha, beta;
  auto tie() const { return std::tie(m, n, k, trans_a, trans_b, ldc, alpha, beta); }
  bool operator<(const MatmulKey &o) const { return tie() < o.tie(); }
};

// A matmul primitive with the layouts it reads and writes.
struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c;
  bool reference = false;  // oneDNN's reference implementation (no native kernel)
};

// One thread's oneDNN engine and stream, its primitives by shape, and the
// bf16 copies of the operands (grown to the largest seen, then reused: a
// step allocates nothing after the first).
struct Bf16Workspace {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<MatmulKey, std::optional<Matmul>> primitives;  // nullopt: refused
  std::vector<uint16_t> a, b;
};

Bf16Workspace &Workspace() {
  thread_local Bf16Workspace workspace;
  return workspace;
}

// op(X) [rows, cols] stored row-major with stride ld: its strides as oneDNN
// reads them from a dense copy of the stored matrix.
Dims StridesOf(bool trans, int rows, int cols) {
  return trans ? Dims{1, rows} : Dims{cols, 1};
}

std::optional<Matmul> MakeMatmul(const dnnl::engine &engine, const MatmulKey &key) {
  const dnnl::memory::desc a({key.m, key.k}, DataType::bf16, StridesOf(key.trans_a, key.m, key.k));
  const dnnl::memory::desc b({key.k, key.n}, DataType::bf16, StridesOf(key.trans_b, key.k, key.n));
  const dnnl::memory::desc c({key.m, key.n}, DataType::f32, Dims{key.ldc, 1});
  dnnl::primitive_attr attr;
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine);
    return Matmul{dnnl::matmul(pd), a, b, c, std::strncmp(pd.impl_info_str(), "ref", 3) == 0};
  } catch (const dnnl::error &) {
    return std::nullopt;
  }
}

// The stored matrix (rows x cols, row stride ld) rounded to bf16, dense.
// Rows split over the OpenMP threads when there are many elements (serial,
// the rounding did not scale with threads while the matmul did).
void RoundToBf16(const float *x, int rows, int cols, int ld, std::vector<uint16_t> &out) {
  out.resize(size_t(rows) * size_t(cols));
#pragma omp parallel for schedule(static) if (int64_t(rows) * cols >= (int64_t(1) << 16))
  for (int r = 0; r < rows; ++r)
    FloatToBFloat16(x + size_t(r) * size_t(ld), out.data() + size_t(r) * size_t(cols), cols);
}

bool Bf16Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc) {
  Bf16Workspace &ws = Workspace();
  const MatmulKey key{m, n, k, trans_a, trans_b, ldc, alpha, beta};
  auto found = ws.primitives.find(key);
  if (found == ws.primitives.end())
    found = ws.primitives.emplace(key, MakeMatmul(ws.engine, key)).first;
  if (!found->second) return false;
  // Stored A is [m, k] or [k, m]; stored B is [k, n] or [n, k].
  RoundToBf16(a, trans_a ? k : m, trans_a ? m : k, lda, ws.a);
  RoundToBf16(b, trans_b ? n : k, trans_b ? k : n, ldb, ws.b);
  const Matmul &mm = *found->second;
  dnnl::memory a_mem(mm.a, ws.engine, ws.a.data());
  dnnl::memory b_mem(mm.b, ws.engine, ws.b.data());
  dnnl::memory c_mem(mm.c, ws.engine, c);
  mm.primitive.execute(ws.stream,
                       {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  ws.stream.wait();
  return true;
}

bool IsAmd() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::strcmp(vendor, "AuthenticAMD") == 0;
}

// Whether oneDNN has a native (not reference) bf16 matmul here, at the ISA cap.
bool HasNativeBf16Matmul() {
  const MatmulKey probe{16, 16, 16, false, false, 16, 1.0f, 0.0f};
  std::optional<Matmul> mm = MakeMatmul(Workspace().engine, probe);
  return mm && !mm->reference;
}

Bf16ComputeChoice ChooseBf16Compute() {
  CpuIsaCap();
  const char *forced = std::getenv("DSTRAIN_BF16_COMPUTE");
  const std::string value = forced != nullptr ? forced : "";
  if (!value.empty() && value != "auto" && value != "on" && value != "off")
    return {false, "",
            "DSTRAIN_BF16_COMPUTE=\"" + value +
                "\" is not a choice: use \"on\", \"off\" or \"auto\" (the default)"};
  if (value == "off") return {false, "forced by DSTRAIN_BF16_COMPUTE=off", ""};
  if (value == "on") {
    if (HasNativeBf16Matmul()) return {true, "forced by DSTRAIN_BF16_COMPUTE=on", ""};
    return {false, "",
            std::string("DSTRAIN_BF16_COMPUTE=on, but oneDNN has no native bf16 matmul on this "
                        "CPU (instruction set ") +
                OneDnnIsa() + "): unset it, and bf16 training computes in fp32"};
  }
  if (CpuIsaCap() == IsaCap::kAvx2)
    return {false, "instruction set capped at AVX2 (DSTRAIN_CPU_ISA=avx2): fp32 compute", ""};
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if (isa == dnnl_cpu_isa_avx512_core_amx)
    return {true, "AMX-BF16 tile instructions: several times the fp32 FMA rate", ""};
  if (isa != dnnl_cpu_isa_avx512_core_bf16)
    return {false, "no native bf16 dot products on this CPU: bf16 training computes in fp32", ""};
  if (IsAmd())
    return {true, "AVX512-BF16 on AMD (Zen 4 and later): bf16 dot products at twice the fp32 rate",
            ""};
  return {false,
          "AVX512-BF16 without AMX on an Intel core: VDPBF16PS issues on one port, so bf16 GEMMs "
          "run at about half the fp32 FMA rate; bf16 training computes in fp32 "
          "(DSTRAIN_BF16_COMPUTE=on forces bf16)",
          ""};
}

}  // namespace

const Bf16ComputeChoice &Bf16Compute() {
  static const Bf16ComputeChoice choice = ChooseBf16Compute();
  return choice;
}

void Gemm(ComputeType compute, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  if (compute == ComputeType::kBf16 && m > 0 && n > 0 && k > 0 &&
      Bf16Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace dst::cpu
