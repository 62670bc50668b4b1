#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/cpu_step_kernels.h"

namespace dst {

template <typename T>
const Kernels<T> &HostKernels() {
  static const cpu::CpuKernels<T> kernels;
  return kernels;
}

template const Kernels<float> &HostKernels<float>();
template const Kernels<double> &HostKernels<double>();

const StepKernels &HostStepKernels() {
  static const cpu::CpuStepKernels<> kernels;
  return kernels;
}

}  // namespace dst
