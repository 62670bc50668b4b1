// bench_gelu: the GELU forward and backward loops' elements/s on their AVX2
// and AVX-512 forms (the fp32 element-wise path, issue 17), one thread, over
// the bench GPT's MLP activation (micro-batch 8 x context 256 x 4 x 384
// elements, 12 MB: out of L2) and an L2-resident one (64K elements), each
// form interleaved with the other and timed best-of-N; the ratio is the
// speed-up the AVX-512 form gives. Then the softmax's exp-and-sum
// (ExpShiftedAndSum) the same way, over attention rows and a vocabulary row.
//
// Usage: bench_gelu [--json]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/kernels/cpu/vector_math.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char **argv) {
  const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  omp_set_num_threads(1);
  if (!dst::cpu::Avx512Elementwise())
    std::fprintf(stderr,
                 "bench_gelu: no AVX-512 here (or DSTRAIN_CPU_ISA=avx2): both columns "
                 "are the AVX2 form\n");
  if (json) std::printf("[");
  bool first = true;
  for (int64_t n : {int64_t(8) * 256 * 4 * 384, int64_t(1) << 16}) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    const size_t count = static_cast<size_t>(n);
    std::vector<float> x(count), dout(count), out(count);
    for (float &v : x) v = normal(rng);
    for (float &v : dout) v = normal(rng);
    const bool wide_ok = dst::cpu::Avx512Elementwise();
    // [pass][wide]: best seconds, the two forms alternating run by run.
    double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}};
    const int reps = n > (1 << 20) ? 40 : 4000;
    for (int rep = 0; rep < reps; ++rep)
      for (int wide = 0; wide < 2; ++wide)
        for (int pass = 0; pass < 2; ++pass) {
          const bool use = wide == 1 && wide_ok;
          const double t = Now();
          if (pass == 0)
            dst::cpu::GeluRange(x.data(), out.data(), 0, n, use);
          else
            dst::cpu::GeluGradRange(dout.data(), x.data(), out.data(), 0, n, use);
          best[pass][wide] = std::min(best[pass][wide], Now() - t);
        }
    for (int pass = 0; pass < 2; ++pass) {
      const double avx2 = double(n) / best[pass][0] / 1e9, avx512 = double(n) / best[pass][1] / 1e9;
      const char *name = pass == 0 ? "forward" : "backward";
      if (json) {
        std::printf(
            "%s{\"elements\":%lld,\"pass\":\"%s\",\"avx2_gelems\":%.3f,"
            "\"avx512_gelems\":%.3f,\"ratio\":%.3f}",
            first ? "" : ",", static_cast<long long>(n), name, avx2, avx512, avx512 / avx2);
      } else {
        std::printf("GELU %-8s %9lld elements: AVX2 %.3f G/s, AVX-512 %.3f G/s (%.2fx)\n", name,
                    static_cast<long long>(n), avx2, avx512, avx512 / avx2);
      }
      first = false;
    }
  }
  // The softmax's exp-and-sum (ExpShiftedAndSum) over the bench GPT's
  // attention rows (256 wide, 8 x 6 x 256 of them) and a GPT-2 vocabulary row.
  for (int64_t width : {int64_t(256), int64_t(50257)}) {
    const int64_t rows = width == 256 ? 8 * 6 * 256 : 64;
    std::mt19937 rng(2);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> base(static_cast<size_t>(width * rows)), work(base.size());
    for (float &v : base) v = normal(rng);
    const bool wide_ok = dst::cpu::Avx512Elementwise();
    double best[2] = {1e30, 1e30};
    float sink = 0;
    for (int rep = 0; rep < 20; ++rep)
      for (int wide = 0; wide < 2; ++wide) {
        work = base;
        const double t = Now();
        for (int64_t r = 0; r < rows; ++r)
          sink += dst::cpu::ExpShiftedAndSum(work.data() + r * width, width, 1.0f,
                                             wide == 1 && wide_ok);
        best[wide] = std::min(best[wide], Now() - t);
      }
    const double n = double(width * rows);
    const double avx2 = n / best[0] / 1e9, avx512 = n / best[1] / 1e9;
    if (json)
      std::printf(
          "%s{\"elements\":%lld,\"pass\":\"exp_sum_%lld\",\"avx2_gelems\":%.3f,"
          "\"avx512_gelems\":%.3f,\"ratio\":%.3f}",
          first ? "" : ",", static_cast<long long>(n), static_cast<long long>(width), avx2, avx512,
          avx512 / avx2);
    else
      std::printf("softmax exp+sum, rows of %5lld: AVX2 %.3f G/s, AVX-512 %.3f G/s (%.2fx)%s\n",
                  static_cast<long long>(width), avx2, avx512, avx512 / avx2,
                  sink == 0.0f ? " " : "");
    first = false;
  }
  if (json) std::printf("]\n");
  return 0;
}
