// The CUDA kernel backend (core/device/cuda_kernels.h) against the CPU one:
// the tiny GPT and sequential chains (tests/common/layer_chain.h) run with
// every tensor in device memory through CudaKernels, and on the host through
// the CPU backend; the losses and every gradient must agree (fp32 within
// 1e-4 of the largest gradient, bf16 GEMMs within 2e-2), the 16-bit stash
// bit for bit, and a failed call is named. Skipped without the plugin or a
// device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/cpu/cpu_kernels.h"
#include "core/device/cuda_kernels.h"
#include "core/device/cuda_seam.h"
#include "tests/common/layer_chain.h"

namespace dst {
namespace {

// One device region handed out in pieces; copies on the backend's stream.
class DeviceMemory final : public TensorMemory {
 public:
  DeviceMemory(const CudaRuntime &runtime, const CudaStream &stream, size_t bytes)
      : resource_(runtime, stream.device()), stream_(stream), bytes_(bytes) {
    Result<void *> p = resource_.Allocate(bytes);
    if (p.ok())
      base_ = static_cast<char *>(p.value());
    else
      status_ = p.status();
  }
  ~DeviceMemory() override {
    if (base_) resource_.Free(base_);
  }
  std::string_view name() const override { return "cuda:0 (test)"; }
  void Zero(void *dst, size_t bytes) override {
    Keep(stream_.FillAsync(dst, 0, bytes));
    Keep(stream_.Synchronize());
  }
  void *TakeBytes(size_t bytes) override {
    if (base_ == nullptr || used_ + bytes > bytes_) return nullptr;
    void *p = base_ + used_;
    used_ += (bytes + 255) / 256 * 256;
    return p;
  }
  void Upload(void *dst, const void *src, size_t bytes) override {
    Keep(stream_.CopyAsync(dst, src, bytes, DST_CUDA_HOST_TO_DEVICE));
    Keep(stream_.Synchronize());
  }
  void Download(void *dst, const void *src, size_t bytes) override {
    Keep(stream_.CopyAsync(dst, src, bytes, DST_CUDA_DEVICE_TO_HOST));
    Keep(stream_.Synchronize());
  }
  const Status &status() const { return status_; }

 private:
  void Keep(Status st) {
    if (status_.ok()) status_ = std::move(st);
  }
  CudaMemoryResource resource_;
  const CudaStream &stream_;
  size_t bytes_, used_ = 0;
  char *base_ = nullptr;
  Status status_;
};

// The runtime, a stream and the backend on device 0, or the reason to skip.
struct Device {
  const CudaRuntime *runtime = nullptr;
  std::unique_ptr<CudaStream> stream;
  std::unique_ptr<CudaKernels> kernels;
  std::string why;  // empty when usable
};

Device OpenDevice() {
  Device d;
  Result<const CudaRuntime *> runtime = CudaRuntime::Get();
  if (!runtime.ok()) {
    d.why = runtime.status().message();
    return d;
  }
  d.runtime = runtime.value();
  Result<CudaStream> stream = CudaStream::Create(*d.runtime, 0);
  if (!stream.ok()) {
    d.why = stream.status().message();
    return d;
  }
  d.stream = std::make_unique<CudaStream>(std::move(stream.value()));
  Result<std::unique_ptr<CudaKernels>> kernels = CudaKernels::Create(*d.runtime, *d.stream);
  if (!kernels.ok()) {
    d.why = kernels.status().message();
    return d;
  }
  d.kernels = std::move(kernels.value());
  return d;
}

#define DST_DEVICE_OR_SKIP(d) \
  Device d = OpenDevice();    \
  if (d.kernels == nullptr) GTEST_SKIP() << "skipped: " << d.why

void ExpectClose(const std::vector<float> &got, const std::vector<float> &want, double rel,
                 const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  ASSERT_GT(scale, 0.0) << what << ": the CPU run's values are all zero";
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - double(want[i])), rel * scale)
        << what << " [" << i << "]: " << got[i] << " vs " << want[i];
}

// A device outcome against the CPU's: no errors, the loss and the gradients within `rel`.
void ExpectSameOutcome(const ChainOutcome &got, const ChainOutcome &want, double rel) {
  ASSERT_EQ(want.error, "");
  ASSERT_EQ(got.error, "");
  EXPECT_NEAR(got.loss, want.loss, rel * std::fabs(want.loss));
  ExpectClose(got.grads, want.grads, rel, "parameter gradients");
  if (!want.input_grad.empty()) ExpectClose(got.input_grad, want.input_grad, rel, "input gradient");
}

// The chain on the device against the same chain on the host.
void ExpectChainMatchesTheCpu(Device &d, std::unique_ptr<Chain> (*make)(), ChainPass pass,
                              ComputeType compute, double rel) {
  std::unique_ptr<Chain> cpu_chain = MakeChain(make), gpu_chain = MakeChain(make);
  cpu_chain->compute = gpu_chain->compute = compute;
  HostMemory host(64 << 20);
  const ChainOutcome want = RunChain(*cpu_chain, HostKernels<float>(), host, pass);
  DeviceMemory device(*d.runtime, *d.stream, 64 << 20);
  ASSERT_TRUE(device.status().ok()) << device.status().message();
  const ChainOutcome got = RunChain(*gpu_chain, *d.kernels, device, pass);
  ASSERT_TRUE(device.status().ok()) << device.status().message();
  ExpectSameOutcome(got, want, rel);
}

// A whole model on the device against the same model on the host.
void ExpectModelMatchesTheCpu(Device &d, const ModelCase &c, double rel) {
  HostMemory host(16 << 20);
  const ChainOutcome want = RunModel(c, HostKernels<float>(), host, /*in_memory=*/false);
  DeviceMemory device(*d.runtime, *d.stream, 64 << 20);
  ASSERT_TRUE(device.status().ok()) << device.status().message();
  const ChainOutcome got = RunModel(c, *d.kernels, device, /*in_memory=*/true);
  ASSERT_TRUE(device.status().ok()) << device.status().message();
  ExpectSameOutcome(got, want, rel);
}

std::unique_ptr<Chain> Mse() {
  return TinySequential(true);
}
std::unique_ptr<Chain> CrossEntropy() {
  return TinySequential(false);
}

TEST(CudaKernelBackend, GptLayersMatchTheCpu) {
  DST_DEVICE_OR_SKIP(d);
  ExpectChainMatchesTheCpu(d, TinyGpt, ChainPass::kWhole, ComputeType::kFp32, 1e-4);
}

// GPT's attention through batched cuBLASLt GEMMs (what the engine chooses
// for GPT-2's head layout within the probabilities' bound): whole, split
// halves with recomputation, and bf16 GEMMs around it.
TEST(CudaKernelBackend, GptLayersThroughTheGemmAttentionMatchTheCpu) {
  DST_DEVICE_OR_SKIP(d);
  const AttentionShape tiny_gpt{2, 8, 16, 2};
  d.kernels->ChooseAttention(tiny_gpt);
  ASSERT_TRUE(d.kernels->KeepsAttentionProbabilities(tiny_gpt))
      << "the GEMM path not chosen (DSTRAIN_CUDA_ATTENTION set?)";
  ExpectChainMatchesTheCpu(d, TinyGpt, ChainPass::kWhole, ComputeType::kFp32, 1e-4);
  ExpectChainMatchesTheCpu(d, TinyGpt, ChainPass::kZeroBubbleRecompute, ComputeType::kFp32, 1e-4);
  ExpectChainMatchesTheCpu(d, TinyGpt, ChainPass::kWhole, ComputeType::kBf16, 2e-2);
  // LLaMA's grouped-query heads still take the fused kernel.
  ExpectChainMatchesTheCpu(d, TinyLlama, ChainPass::kWhole, ComputeType::kFp32, 1e-4);
}

// DSTRAIN_CUDA_KERNEL_TIMES: the entries' device times, printed when the
// kernels' context closes, each entry with its calls.
TEST(CudaKernelBackend, KernelTimesNameEachEntryWithItsCalls) {
  setenv("DSTRAIN_CUDA_KERNEL_TIMES", "1", 1);
  Device d = OpenDevice();
  unsetenv("DSTRAIN_CUDA_KERNEL_TIMES");
  if (d.kernels == nullptr) GTEST_SKIP() << "skipped: " << d.why;
  DeviceMemory device(*d.runtime, *d.stream, 1 << 20);
  ASSERT_TRUE(device.status().ok()) << device.status().message();
  float *x = device.TakeCopy(std::vector<float>(1000, 1.0f));
  for (int i = 0; i < 3; ++i) d.kernels->Zero(1000, x);
  d.kernels->Add(x, x, 1000, x);
  ASSERT_TRUE(d.kernels->TakeError().ok());
  testing::internal::CaptureStderr();
  d.kernels.reset();
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_NE(printed.find("device time"), std::string::npos) << printed;
  EXPECT_NE(printed.find("Zero "), std::string::npos) << printed;
  EXPECT_NE(printed.find("Add "), std::string::npos) << printed;
  const size_t zero = printed.find("Zero ");
  ASSERT_NE(zero, std::string::npos);
  EXPECT_NE(printed.substr(zero, 40).find(" 3 "), std::string::npos) << printed;
}

TEST(CudaKernelBackend, GptZeroBubbleHalvesAndRecomputationMatchTheCpu) {
  DST_DEVICE_OR_SKIP(d);
  ExpectChainMatchesTheCpu(d, TinyGpt, ChainPass::kZeroBubbleRecompute, ComputeType::kFp32, 1e-4);
}

// LLaMA (RMSNorm, rotary with Llama 3.1's scaling, grouped-query attention,
// the SiLU gate, the untied head) and BLOOM (ALiBi, the interleaved fused
// projection, the embedding LayerNorm) through the general attention kernels.
TEST(CudaKernelBackend, LlamaAndBloomLayersMatchTheCpu) {
  DST_DEVICE_OR_SKIP(d);
  ExpectChainMatchesTheCpu(d, TinyLlama, ChainPass::kWhole, ComputeType::kFp32, 1e-4);
  ExpectChainMatchesTheCpu(d, TinyLlama, ChainPass::kZeroBubbleRecompute, ComputeType::kFp32, 1e-4);
  ExpectChainMatchesTheCpu(d, TinyBloom, ChainPass::kWhole, ComputeType::kFp32, 1e-4);
  ExpectChainMatchesTheCpu(d, TinyBloom, ChainPass::kZeroBubbleRecompute, ComputeType::kFp32, 1e-4);
}

TEST(CudaKernelBackend, Bf16GemmsMatchTheCpusBf16Gemms) {
  DST_DEVICE_OR_SKIP(d);
  ExpectChainMatchesTheCpu(d, TinyGpt, ChainPass::kWhole, ComputeType::kBf16, 2e-2);
}

TEST(CudaKernelBackend, SequentialLayersMatchTheCpu) {
  DST_DEVICE_OR_SKIP(d);
  ExpectChainMatchesTheCpu(d, Mse, ChainPass::kWhole, ComputeType::kFp32, 1e-4);
  ExpectChainMatchesTheCpu(d, CrossEntropy, ChainPass::kZeroBubbleRecompute, ComputeType::kFp32,
                           1e-4);
}

// A model's step on the device: its parameters, gradients, activation store
// and work buffers in device memory (Model's MemoryResource).
TEST(CudaKernelBackend, AModelsStepMatchesTheCpu) {
  DST_DEVICE_OR_SKIP(d);
  ExpectModelMatchesTheCpu(d, ModelCase{}, 1e-4);
}

// 16-bit training's stash (bf16 keep), its rounding of layer outputs, and
// full recomputation: the rounding is the same formula on both sides, so
// only the fp32 arithmetic differs (a value near a rounding boundary may
// round the other way: the looser bound).
TEST(CudaKernelBackend, AModelsBf16StashAndRecomputationMatchTheCpu) {
  DST_DEVICE_OR_SKIP(d);
  ModelCase keep;
  keep.activations.half = Half::kBf16;
  ExpectModelMatchesTheCpu(d, keep, 2e-2);
  ModelCase recompute = keep;
  recompute.activations.recompute = true;
  ExpectModelMatchesTheCpu(d, recompute, 2e-2);
  ModelCase split;
  split.activations.split_backward = true;
  split.activations.selective = true;
  split.pass = ChainPass::kZeroBubbleRecompute;
  ExpectModelMatchesTheCpu(d, split, 1e-4);
}

// The activation store's conversions: the same bits as the CPU's, NaN and
// infinities included.
TEST(CudaKernelBackend, The16BitStashMatchesTheCpuBitForBit) {
  DST_DEVICE_OR_SKIP(d);
  std::mt19937 rng(3);
  std::vector<float> x(4099);
  for (float &v : x) {
    uint32_t bits = uint32_t(rng());
    std::memcpy(&v, &bits, sizeof v);
  }
  x[0] = std::numeric_limits<float>::infinity();
  x[1] = -0.0f;
  x[2] = std::numeric_limits<float>::quiet_NaN();
  const int64_t n = int64_t(x.size());
  for (Half half : {Half::kBf16, Half::kFp16}) {
    std::vector<float> cpu_x = x, cpu_back(x.size()), gpu_x(x.size()), gpu_back(x.size());
    std::vector<uint16_t> cpu_stash(x.size()), gpu_stash(x.size());
    HostKernels<float>().StashTo16(half, cpu_x.data(), n, cpu_stash.data());
    HostKernels<float>().UnstashFrom16(half, cpu_stash.data(), n, cpu_back.data());
    DeviceMemory device(*d.runtime, *d.stream, 1 << 20);
    float *dx = device.TakeCopy(x), *dback = device.Take<float>(n);
    uint16_t *dstash = device.Take<uint16_t>(n);
    d.kernels->StashTo16(half, dx, n, dstash);
    d.kernels->UnstashFrom16(half, dstash, n, dback);
    ASSERT_TRUE(d.kernels->TakeError().ok());
    device.Download(gpu_x.data(), dx, x.size() * sizeof(float));
    device.Download(gpu_stash.data(), dstash, x.size() * sizeof(uint16_t));
    device.Download(gpu_back.data(), dback, x.size() * sizeof(float));
    ASSERT_TRUE(device.status().ok()) << device.status().message();
    EXPECT_EQ(gpu_stash, cpu_stash) << HalfName(half);
    EXPECT_EQ(std::memcmp(gpu_x.data(), cpu_x.data(), x.size() * sizeof(float)), 0)
        << HalfName(half);
    EXPECT_EQ(std::memcmp(gpu_back.data(), cpu_back.data(), x.size() * sizeof(float)), 0)
        << HalfName(half);
  }
}

// The deferred loss forwards add the returning forwards' means into one
// device double, two micro-batches' worth (an ignored target included); no
// host wait until the sum is read.
TEST(CudaKernelBackend, DeferredLossesAddTheMeansOnTheDevice) {
  DST_DEVICE_OR_SKIP(d);
  const int64_t rows = 300, V = 1000;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(size_t(rows * V));
  for (float &v : logits) v = normal(rng);
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) targets[size_t(r)] = int32_t(rng() % uint32_t(V));
  targets[7] = kIgnoredTarget;
  DeviceMemory device(*d.runtime, *d.stream, 16 << 20);
  const int32_t *dt = device.TakeCopy(targets);
  double *sum = device.Take<double>(1);
  device.Zero(sum, sizeof(double));
  double want = 0;
  for (int pass = 0; pass < 2; ++pass) {  // the returning forward, then the deferred one
    float *a = device.TakeCopy(logits), *b = device.TakeCopy(logits);
    int64_t counted = 0;
    want += d.kernels->SoftmaxCrossEntropyForward(a, dt, rows, V, &counted);
    EXPECT_EQ(counted, rows - 1);
    d.kernels->SoftmaxCrossEntropyForwardInto(b, dt, rows, V, sum);
  }
  double got = 0;
  device.Download(&got, sum, sizeof got);
  ASSERT_TRUE(d.kernels->TakeError().ok());
  ASSERT_TRUE(device.status().ok()) << device.status().message();
  EXPECT_NEAR(got, want, 1e-9 * std::fabs(want));
}

// A failed call is kept and named (the first one), then cleared.
TEST(CudaKernelBackend, AFailedCallIsNamedOnce) {
  DST_DEVICE_OR_SKIP(d);
  d.kernels->Copy(nullptr, 16, nullptr);  // cudaMemcpy2DAsync rejects null pointers
  d.kernels->Zero(16, nullptr);
  const Status st = d.kernels->TakeError();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("CUDA kernel Copy on cuda:0"), std::string::npos) << st.message();
  EXPECT_TRUE(d.kernels->TakeError().ok());
}

}  // namespace
}  // namespace dst
