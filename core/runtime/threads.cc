#include "core/runtime/threads.h"

#include <cblas.h>
#include <omp.h>

#include <cstdlib>
#include <thread>

namespace dst {

namespace {
int PositiveIntFromEnv(const char *name) {
  const char *text = std::getenv(name);
  if (!text || !*text) return 0;
  char *end = nullptr;
  long value = std::strtol(text, &end, 10);
  return (*end == '\0' && value > 0 && value < 4096) ? static_cast<int>(value) : 0;
}
}  // namespace

int ResolveNumThreads(int configured) {
  if (configured > 0) return configured;
  if (int n = PositiveIntFromEnv("DSTRAIN_NUM_THREADS")) return n;
  if (int n = PositiveIntFromEnv("OMP_NUM_THREADS")) return n;
  unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 ? static_cast<int>(cores) : 1;
}

void SetNumThreads(int threads) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int MaxThreads() { return omp_get_max_threads(); }

}  // namespace dst
