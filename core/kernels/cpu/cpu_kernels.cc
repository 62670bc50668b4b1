#include "core/kernels/cpu/cpu_kernels.h"

namespace dst {

template <typename T>
const Kernels<T> &HostKernels() {
  static const cpu::CpuKernels<T> kernels;
  return kernels;
}

template const Kernels<float> &HostKernels<float>();
template const Kernels<double> &HostKernels<double>();

}  // namespace dst
