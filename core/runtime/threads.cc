#include "core/runtime/threads.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <string>
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

Status CheckThreadCount(int configured) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (configured > 8 * cores)
    return ConfigError("dstrain.num_threads " + std::to_string(configured) + " is far above the " +
                       std::to_string(cores) +
                       " cores this process can use; threads beyond the cores only fight "
                       "over them: set at most " +
                       std::to_string(cores) + " (or leave it unset to use every core)");
  return Status::Ok();
}

int ResolveNumThreads(int configured) {
  if (configured > 0) return configured;
  if (int n = PositiveIntFromEnv("DSTRAIN_NUM_THREADS")) return n;
  if (int n = PositiveIntFromEnv("OMP_NUM_THREADS")) return n;
  // Ranks sharing a node share its cores (LOCAL_WORLD_SIZE is set by
  // `dstrain launch` and torchrun; Open MPI and Slurm have their own names).
  int local_ranks = PositiveIntFromEnv("LOCAL_WORLD_SIZE");
  if (!local_ranks) local_ranks = PositiveIntFromEnv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!local_ranks) local_ranks = 1;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::max(1, cores / local_ranks);
}

void SetNumThreads(int threads) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int MaxThreads() {
  return omp_get_max_threads();
}

}  // namespace dst
