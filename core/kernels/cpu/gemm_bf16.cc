// bf16 compute for fp32 GEMMs (ComputeType::kBf16) and the per-CPU choice of
// whether bf16 training uses it.
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/kernels/cpu/cpu_isa.h"
#include "core/kernels/cpu/gemm.h"
#include "core/precision/convert.h"

namespace dst::cpu {

namespace {

using Dims = dnnl::memory::dims;
using DataType = dnnl::memory::data_type;

// A GEMM's shape as oneDNN sees it: lda/ldb are the row strides of the bf16
// matrices it reads (a dense scratch copy's, or a caller's bf16 operand's),
// ldc is C's.
struct MatmulKey {
  int m, n, k;
  bool trans_a, trans_b;
  int lda, ldb, ldc;
  float alpha, beta;
  bool bias;  // a row vector [n] added to every row of the product as it is written
  auto tie() const { return std::tie(m, n, k, trans_a, trans_b, lda, ldb, ldc, alpha, beta, bias); }
  bool operator<(const MatmulKey &o) const { return tie() < o.tie(); }
};

// A matmul primitive with the memory objects it runs on, made once: a call
// points them at its operands (set_data_handle) and runs the primitive, so a
// small GEMM (attention's per-head products) does not pay for creating four
// memory objects and an argument map each time (measured: 1.2-1.5 us of a
// 6-16 us product).
struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory a, b, c, bias;
  std::unordered_map<int, dnnl::memory> args;
  bool reference = false;  // oneDNN's reference implementation (no native kernel)
};

// One thread's oneDNN engine and stream, its primitives by shape, and the
// bf16 copies of fp32 operands (grown to the largest seen, then reused: a
// step allocates nothing after the first).
struct Bf16Workspace {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<MatmulKey, std::optional<Matmul>> primitives;  // nullopt: refused
  std::vector<uint16_t> a, b;
  std::vector<float> wide_a, wide_b;  // a refused shape's bf16 operands, widened
};

Bf16Workspace &Workspace() {
  thread_local Bf16Workspace workspace;
  return workspace;
}

// op(X) [rows, cols] stored row-major with row stride ld: its strides as
// oneDNN reads them.
Dims StridesOf(bool trans, int ld) {
  return trans ? Dims{1, ld} : Dims{ld, 1};
}

std::optional<Matmul> MakeMatmul(const dnnl::engine &engine, const MatmulKey &key) {
  const dnnl::memory::desc a({key.m, key.k}, DataType::bf16, StridesOf(key.trans_a, key.lda));
  const dnnl::memory::desc b({key.k, key.n}, DataType::bf16, StridesOf(key.trans_b, key.ldb));
  const dnnl::memory::desc c({key.m, key.n}, DataType::f32, Dims{key.ldc, 1});
  const dnnl::memory::desc bias =
      key.bias ? dnnl::memory::desc({1, key.n}, DataType::f32, Dims{key.n, 1})
               : dnnl::memory::desc();
  dnnl::primitive_attr attr;
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  try {
    const dnnl::matmul::desc desc =
        key.bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c);
    const dnnl::matmul::primitive_desc pd(desc, attr, engine);
    Matmul mm{dnnl::matmul(pd),
              dnnl::memory(a, engine, DNNL_MEMORY_NONE),
              dnnl::memory(b, engine, DNNL_MEMORY_NONE),
              dnnl::memory(c, engine, DNNL_MEMORY_NONE),
              {},
              {},
              std::strncmp(pd.impl_info_str(), "ref", 3) == 0};
    mm.args = {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}};
    if (key.bias) {
      mm.bias = dnnl::memory(bias, engine, DNNL_MEMORY_NONE);
      mm.args.emplace(DNNL_ARG_BIAS, mm.bias);
    }
    return mm;
  } catch (const dnnl::error &) {
    return std::nullopt;
  }
}

#if defined(__x86_64__)
// GCC 12's AVX-512 headers start intrinsics from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports at every use (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// FloatToBFloat16's integer steps on 16 lanes (so the same bits): NaN -> its
// top half, quieted; else x + 0x7FFF + (bit 16 of x), top half.
__attribute__((target("avx512f"))) inline __m512i Bf16Lanes(__m512 x) {
  const __m512i v = _mm512_castps_si512(x);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(v, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(v, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __m512i quieted = _mm512_or_si512(_mm512_srli_epi32(v, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(nan, rounded, quieted);
}

__attribute__((target("avx512f"))) void RoundRowAvx512(const float *x, uint16_t *out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + i),
                        _mm512_cvtepi32_epi16(Bf16Lanes(_mm512_loadu_ps(x + i))));
  if (i < n) {  // the last n - i values under a mask (nothing past n is read or written)
    const __mmask16 tail = __mmask16((1u << (n - i)) - 1u);
    _mm512_mask_cvtepi32_storeu_epi16(out + i, tail, Bf16Lanes(_mm512_maskz_loadu_ps(tail, x + i)));
  }
}
#pragma GCC diagnostic pop

bool HaveAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f") && CpuIsaCap() == IsaCap::kNative;
  return have;
}
#endif

// The operand as oneDNN reads it: a caller's bf16 matrix, or the fp32 one
// rounded into `scratch` (stored [rows, cols], dense).
const uint16_t *Bf16Data(const GemmOperand &x, int rows, int cols, std::vector<uint16_t> &scratch,
                         int &ld) {
  if (x.bf16 != nullptr) {
    ld = x.ld;
    return x.bf16;
  }
  RoundToBf16(x.f32, rows, cols, x.ld, scratch);
  ld = cols;
  return scratch.data();
}

// The operand widened to fp32 (a shape oneDNN refused).
const float *Fp32Data(const GemmOperand &x, int rows, int cols, std::vector<float> &scratch,
                      int &ld) {
  if (x.f32 != nullptr) {
    ld = x.ld;
    return x.f32;
  }
  scratch.resize(size_t(rows) * size_t(cols));
  if (cols > 0)
    for (int r = 0; r < rows; ++r)
      BFloat16ToFloat(x.bf16 + size_t(r) * size_t(x.ld), scratch.data() + size_t(r) * size_t(cols),
                      cols);
  ld = cols;
  return scratch.data();
}

// Runs the product in bf16 (plus bias [n] on every row, if given); false
// when oneDNN refuses the shape.
bool Bf16Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const GemmOperand &a,
              const GemmOperand &b, float beta, float *c, int ldc, const float *bias = nullptr) {
  Bf16Workspace &ws = Workspace();
  // Stored A is [m, k] or [k, m]; stored B is [k, n] or [n, k].
  const int a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  const MatmulKey key{m,
                      n,
                      k,
                      trans_a,
                      trans_b,
                      a.bf16 != nullptr ? a.ld : a_cols,
                      b.bf16 != nullptr ? b.ld : b_cols,
                      ldc,
                      alpha,
                      beta,
                      bias != nullptr};
  auto found = ws.primitives.find(key);
  if (found == ws.primitives.end())
    found = ws.primitives.emplace(key, MakeMatmul(ws.engine, key)).first;
  if (!found->second) return false;
  int lda = 0, ldb = 0;
  const uint16_t *a16 = Bf16Data(a, a_rows, a_cols, ws.a, lda);
  const uint16_t *b16 = Bf16Data(b, b_rows, b_cols, ws.b, ldb);
  Matmul &mm = *found->second;
  mm.a.set_data_handle(const_cast<uint16_t *>(a16));
  mm.b.set_data_handle(const_cast<uint16_t *>(b16));
  mm.c.set_data_handle(c);
  if (bias != nullptr) mm.bias.set_data_handle(const_cast<float *>(bias));
  mm.primitive.execute(ws.stream, mm.args);
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
  const MatmulKey probe{16, 16, 16, false, false, 16, 16, 16, 1.0f, 0.0f, false};
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

void RoundRowToBf16(const float *x, uint16_t *out, int64_t n) {
#if defined(__x86_64__)
  if (HaveAvx512()) return RoundRowAvx512(x, out, n);
#endif
  FloatToBFloat16(x, out, n);
}

void RoundToBf16(const float *x, int64_t rows, int64_t cols, int64_t ld, uint16_t *out) {
#pragma omp parallel for schedule(static) if (rows * cols >= (int64_t(1) << 16))
  for (int64_t r = 0; r < rows; ++r) RoundRowToBf16(x + r * ld, out + r * cols, cols);
}

void RoundToBf16(const float *x, int64_t rows, int64_t cols, int64_t ld,
                 std::vector<uint16_t> &out) {
  out.resize(size_t(rows) * size_t(cols));
  RoundToBf16(x, rows, cols, ld, out.data());
}

void GemmBf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, GemmOperand a,
              GemmOperand b, float beta, float *c, int ldc) {
  if (m > 0 && n > 0 && k > 0 && Bf16Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c, ldc))
    return;
  Bf16Workspace &ws = Workspace();
  int lda = 0, ldb = 0;
  const float *a32 = Fp32Data(a, trans_a ? k : m, trans_a ? m : k, ws.wide_a, lda);
  const float *b32 = Fp32Data(b, trans_b ? n : k, trans_b ? k : n, ws.wide_b, ldb);
  Gemm(trans_a, trans_b, m, n, k, alpha, a32, lda, b32, ldb, beta, c, ldc);
}

void GemmBf16Bias(bool trans_a, bool trans_b, int m, int n, int k, GemmOperand a, GemmOperand b,
                  const float *bias, float *c, int ldc) {
  if (m > 0 && n > 0 && k > 0 &&
      Bf16Gemm(trans_a, trans_b, m, n, k, 1.0f, a, b, 0.0f, c, ldc, bias))
    return;
  for (int r = 0; r < m; ++r) std::copy(bias, bias + n, c + size_t(r) * size_t(ldc));
  GemmBf16(trans_a, trans_b, m, n, k, 1.0f, a, b, 1.0f, c, ldc);
}

void Gemm(ComputeType compute, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  if (compute == ComputeType::kBf16 && m > 0 && n > 0 && k > 0 &&
      Bf16Gemm(trans_a, trans_b, m, n, k, alpha, Fp32Operand(a, lda), Fp32Operand(b, ldb), beta, c,
               ldc))
    return;
  Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace dst::cpu
