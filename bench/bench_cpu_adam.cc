// bench_cpu_adam: CPU-Adam's elements/s on each of its paths (scalar, AVX2,
// AVX-512) and the previous compiler-vectorised AdamUpdate, one thread, beside
// a STREAM-like triad's bandwidth in the same run: Adam reads param, grad,
// exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq (28 bytes per
// element; 30 with a bf16 copy), so bytes/s over the triad's is the fraction
// of the memory bandwidth reached. CPU-Lamb's step on each path too: two
// passes (moments and norms: read p, g, m, v, write m, v; then the update:
// read p, m, v, write p), 40 bytes per element.
//
// Usage: bench_cpu_adam [--elements N] [--json]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/kernels/cpu/cpu_adam.h"
#include "core/kernels/cpu/cpu_lamb.h"
#include "core/kernels/cpu/optimizers.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best seconds of `run` over repetitions lasting ~1 s.
template <typename Run>
double Best(Run run) {
  run();  // warm-up: page faults
  double best = 1e30, spent = 0;
  for (int rep = 0; rep < 50 && spent < 1.0; ++rep) {
    const double t = Now();
    run();
    const double dt = Now() - t;
    best = std::min(best, dt);
    spent += dt;
  }
  return best;
}

}  // namespace

int main(int argc, char **argv) {
  int64_t n = int64_t(1) << 24;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--elements") == 0 && i + 1 < argc) n = std::atoll(argv[++i]);
    if (std::strcmp(argv[i], "--json") == 0) json = true;
  }
  omp_set_num_threads(1);
  std::vector<float> p(n, 0.5f), g(n, 1e-3f), m(n, 0.0f), v(n, 0.0f), a(n), b(n, 1.0f), c(n, 2.0f);
  std::vector<uint16_t> half(n);
  const dst::cpu::AdamHyper h{1e-3, 0.9, 0.999, 1e-8, 0.01, 5, true};
  const double triad = Best([&] {
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
  });
  const double triad_bw = 12.0 * double(n) / triad;  // 2 reads + 1 write of 4 bytes
  // Adam's own streams with no arithmetic to speak of (read p, g, m, v; write
  // p, m, v): the memory ceiling of its access pattern. One thread's triad is
  // not one here: its 2 read streams keep fewer lines in flight than Adam's 4.
  const double streams = Best([&] {
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i];
      p[i] += gi;
      m[i] += gi;
      v[i] += gi;
    }
  });
  const double streams_bw = 28.0 * double(n) / streams;
  std::fill(p.begin(), p.end(), 0.5f);
  std::fill(m.begin(), m.end(), 0.0f);
  std::fill(v.begin(), v.end(), 0.0f);
  struct Row {
    std::string name;
    double seconds, bytes;
  };
  std::vector<Row> rows;
  rows.push_back({"AdamUpdate (compiler-vectorised)",
                  Best([&] { dst::cpu::AdamUpdate(p.data(), g.data(), m.data(), v.data(), n, h); }),
                  28.0});
  for (const auto path :
       {dst::cpu::SimdPath::kScalar, dst::cpu::SimdPath::kAvx2, dst::cpu::SimdPath::kAvx512}) {
    if (path == dst::cpu::SimdPath::kAvx512 && dst::cpu::BestSimdPath() != path) continue;
    for (const bool copy : {false, true}) {
      dst::cpu::CpuAdamRange r{
          p.data(),        g.data(), m.data(), v.data(), n, 1.0f, copy ? half.data() : nullptr,
          dst::Half::kBf16};
      rows.push_back(
          {std::string("CPU-Adam ") + dst::cpu::SimdPathName(path) + (copy ? " + bf16 copy" : ""),
           Best([&] { dst::cpu::CpuAdamUpdate(r, h, path); }), copy ? 30.0 : 28.0});
    }
  }
  const dst::cpu::LambHyper lamb{1e-3, 0.9, 0.999, 1e-8, 0.01, 5};
  for (const auto path :
       {dst::cpu::SimdPath::kScalar, dst::cpu::SimdPath::kAvx2, dst::cpu::SimdPath::kAvx512}) {
    if (path == dst::cpu::SimdPath::kAvx512 && dst::cpu::BestSimdPath() != path) continue;
    dst::cpu::LambRange r{p.data(), g.data(), m.data(), v.data(),
                          n,        1.0f,     nullptr,  dst::Half::kBf16};
    rows.push_back({std::string("CPU-Lamb ") + dst::cpu::SimdPathName(path), Best([&] {
                      const dst::cpu::LambSums sums = dst::cpu::LambMomentsOn(r, lamb, path);
                      dst::cpu::LambApplyOn(r, lamb, dst::cpu::LambTrustRatio(sums, lamb), path);
                    }),
                    40.0});
  }
  if (json) {
    std::printf(
        "{\"elements\": %lld, \"triad_bytes_per_second\": %.6g, "
        "\"adam_streams_bytes_per_second\": %.6g, \"rows\": [",
        (long long)n, triad_bw, streams_bw);
    for (size_t i = 0; i < rows.size(); ++i)
      std::printf(
          "%s{\"name\": \"%s\", \"elements_per_second\": %.6g, \"bandwidth_fraction\": "
          "%.4f, \"streams_fraction\": %.4f}",
          i ? ", " : "", rows[i].name.c_str(), double(n) / rows[i].seconds,
          rows[i].bytes * double(n) / rows[i].seconds / triad_bw,
          rows[i].bytes * double(n) / rows[i].seconds / streams_bw);
    std::printf("]}\n");
    return 0;
  }
  std::printf("%lld elements, 1 thread; triad %.1f GB/s\n", (long long)n, triad_bw / 1e9);
  for (const Row &r : rows)
    std::printf("%-40s %8.1f M elements/s  %5.1f%% of triad bandwidth\n", r.name.c_str(),
                double(n) / r.seconds / 1e6, 100.0 * r.bytes * double(n) / r.seconds / triad_bw);
  return 0;
}
