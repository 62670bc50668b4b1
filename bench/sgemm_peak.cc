// sgemm_peak: the best single-precision GEMM rate dstrain's GEMM backend
// (dst::cpu::Gemm: oneDNN unless DSTRAIN_GEMM says otherwise) reaches on this
// machine at a given thread count, beside OpenBLAS's own, over square sizes 512..2048 and over the
// GEMM shapes of the bench_gpt training step (GPT 6x384, n_ctx 256, micro-batch
// 8: 2048 tokens). This is the denominator of "fraction of SGEMM peak" in
// bench/bench_gpt.py. Where the CPU has AVX512-BF16 it also measures the bf16
// GEMM bf16 training uses (dst::cpu::GemmBf16: oneDNN's bf16 matmul with fp32
// accumulation) on operands already rounded to bf16 — the GEMM alone, not the
// rounding of fp32 operands the layers still do for some of theirs: the
// denominator of bf16 rows.
//
// Usage: sgemm_peak [--threads N] [--quick] [--json]
//   --json prints one JSON object on the last line (for the orchestrator).
#include <omp.h>

#include "core/kernels/cpu/gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Shape {
  std::string label;
  int m, n, k;
  bool trans_a, trans_b;
};

double Now() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Best GFLOP/s of C[m,n] = op(A) op(B) over repetitions lasting ~min_seconds
// (bf16: the bf16 compute path, whatever the backend).
double Measure(dst::cpu::GemmBackend backend, const Shape &s, double min_seconds,
               bool bf16 = false) {
  const size_t a_size = static_cast<size_t>(s.m) * s.k;
  const size_t b_size = static_cast<size_t>(s.k) * s.n;
  std::vector<float> a(a_size), b(b_size), c(static_cast<size_t>(s.m) * s.n);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float &x : a) x = dist(rng);
  for (float &x : b) x = dist(rng);
  const int lda = s.trans_a ? s.m : s.k;  // row-major: A is [m,k] or [k,m]
  const int ldb = s.trans_b ? s.k : s.n;  // B is [k,n] or [n,k]
  std::vector<uint16_t> a16, b16;  // bf16: the operands rounded once, before timing
  if (bf16) {
    dst::cpu::RoundToBf16(a.data(), s.trans_a ? s.k : s.m, lda, lda, a16);
    dst::cpu::RoundToBf16(b.data(), s.trans_b ? s.n : s.k, ldb, ldb, b16);
  }
  auto run = [&] {
    if (bf16)
      dst::cpu::GemmBf16(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f,
                         dst::cpu::Bf16Operand(a16.data(), lda),
                         dst::cpu::Bf16Operand(b16.data(), ldb), 0.0f, c.data(), s.n);
    else
      dst::cpu::GemmWith(backend, s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda,
                         b.data(), ldb, 0.0f, c.data(), s.n);
  };
  run();  // warm-up: page faults, thread start
  const double flops = 2.0 * s.m * s.n * s.k;
  double best = 1e30, start = Now();
  int reps = 0;
  while (reps < 3 || Now() - start < min_seconds) {
    double t0 = Now();
    run();
    best = std::min(best, Now() - t0);
    ++reps;
  }
  return flops / best / 1e9;
}

}  // namespace

int main(int argc, char **argv) {
  int threads = 1;
  bool quick = false, json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else {
      std::fprintf(stderr, "usage: sgemm_peak [--threads N] [--quick] [--json]\n");
      return 2;
    }
  }
  if (threads < 1) threads = 1;
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
  using dst::cpu::GemmBackend;
  const GemmBackend ours = dst::cpu::ActiveGemmBackend();
  const double min_seconds = quick ? 0.05 : 0.3;

  std::vector<Shape> shapes;
  for (int n : {512, 768, 1024, 1536, 2048}) {
    shapes.push_back({"square " + std::to_string(n), n, n, n, false, false});
  }
  // Training GEMMs of bench_gpt (tokens N = 2048, C = 384, V = 256), as
  // (forward Y = X W^T, input grad dX = dY W, weight grad dW = dY^T X).
  const int tokens = 2048;
  const struct {
    const char *name;
    int out, in;
  } linears[] = {{"c_attn", 1152, 384},
                 {"attn.c_proj", 384, 384},
                 {"c_fc", 1536, 384},
                 {"mlp.c_proj", 384, 1536},
                 {"lm_head", 256, 384}};
  for (const auto &l : linears) {
    std::string n = l.name;
    shapes.push_back({n + " fwd", tokens, l.out, l.in, false, true});
    shapes.push_back({n + " dX", tokens, l.in, l.out, false, false});
    shapes.push_back({n + " dW", l.out, l.in, tokens, true, false});
  }
  shapes.push_back({"attn QK^T (one head)", 256, 256, 64, false, true});
  shapes.push_back({"attn AV (one head)", 256, 64, 256, false, false});

  std::printf("dstrain GEMM: %s on %s; OpenBLAS %s (core %s), %d thread(s)\n",
              dst::cpu::GemmBackendName(ours), dst::cpu::GemmBackendTarget(ours).c_str(),
              openblas_get_config(), openblas_get_corename(), threads);
  const bool bf16 = __builtin_cpu_supports("avx512bf16");
  std::printf("  %-22s %7s %7s %7s %2s  %10s %10s %10s\n", "shape", "m", "n", "k", "", "dstrain",
              "OpenBLAS", bf16 ? "bf16" : "");
  double peak = 0, square_peak = 0, openblas_peak = 0, bf16_peak = 0;
  std::string entries;
  for (const Shape &s : shapes) {
    double g = Measure(ours, s, min_seconds);
    double o = ours == GemmBackend::kOpenBlas ? g : Measure(GemmBackend::kOpenBlas, s, min_seconds);
    openblas_peak = std::max(openblas_peak, o);
    const double h = bf16 ? Measure(ours, s, min_seconds, /*bf16=*/true) : 0.0;
    bf16_peak = std::max(bf16_peak, h);
    std::printf("  %-22s m=%5d n=%5d k=%5d %c%c  %10.1f %10.1f %10.1f GFLOP/s\n", s.label.c_str(),
                s.m, s.n, s.k, s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', g, o, h);
    std::fflush(stdout);
    peak = std::max(peak, g);
    if (s.label.rfind("square", 0) == 0) square_peak = std::max(square_peak, g);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s{\"label\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"gflops\":%.3f}",
                  entries.empty() ? "" : ",", s.label.c_str(), s.m, s.n, s.k, g);
    entries += buf;
  }
  std::printf("peak %.1f GFLOP/s (square sizes: %.1f); OpenBLAS peak %.1f; bf16 peak %.1f\n", peak,
              square_peak, openblas_peak, bf16_peak);
  if (json) {
    std::printf(
        "{\"threads\":%d,\"backend\":\"%s\",\"peak_gflops\":%.3f,\"square_peak_gflops\":%.3f,"
        "\"openblas_peak_gflops\":%.3f,\"bf16_peak_gflops\":%.3f,\"openblas_generic\":%s,"
        "\"shapes\":[%s]}\n",
        threads, dst::cpu::GemmBackendName(ours), peak, square_peak, openblas_peak, bf16_peak,
        dst::cpu::OpenBlasGenericCoreNote().empty() ? "false" : "true", entries.c_str());
  }
  return 0;
}
