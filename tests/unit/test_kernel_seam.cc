// The kernel seam (core/kernels/kernels.h): the layers reach their tensors
// only through the backend. The CPU stands in for a device here: every
// tensor (parameters, gradients, activations, scratch, tokens, targets)
// lives in pages that are mapped without access, and a backend that opens
// them only while one of its kernels runs (cpu::CpuKernels with a Scope).
// A layer that read or wrote a tensor itself — the host-side touch that
// would crash on device memory — faults; the fault handler names the last
// kernel that ran. Each pass (forward, backward, the zero-bubble halves,
// selective recomputation) must also give the same bits as the open run.
#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/cpu/cpu_kernels.h"
#include "core/model/activation_store.h"
#include "core/model/gpt_layers.h"
#include "core/model/sequential_layers.h"

namespace dst {
namespace {

// Page-aligned memory handed out in 64-byte pieces; Close() takes every
// access away, Open() gives it back.
class Arena {
 public:
  explicit Arena(size_t bytes) : bytes_((bytes + 4095) / 4096 * 4096) {
    base_ = static_cast<char *>(
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) base_ = nullptr;
  }
  ~Arena() {
    if (base_) munmap(base_, bytes_);
  }
  Arena(const Arena &) = delete;
  Arena &operator=(const Arena &) = delete;

  template <typename T>
  T *Take(int64_t n) {
    const size_t size = (size_t(n) * sizeof(T) + 63) / 64 * 64;
    if (base_ == nullptr || used_ + size > bytes_) return nullptr;
    T *p = reinterpret_cast<T *>(base_ + used_);
    used_ += size;
    return p;
  }
  void Open() const { mprotect(base_, bytes_, PROT_READ | PROT_WRITE); }
  void Close() const { mprotect(base_, bytes_, PROT_NONE); }
  bool Holds(const void *p) const {
    const char *c = static_cast<const char *>(p);
    return c >= base_ && c < base_ + bytes_;
  }

 private:
  size_t bytes_;
  char *base_ = nullptr;
  size_t used_ = 0;
};

// The guarded backend's state: the arena it opens and the last kernel run.
const Arena *g_arena = nullptr;
const char *g_kernel = "(none)";

struct OpenWhileRunning {
  explicit OpenWhileRunning(const char *kernel) {
    g_kernel = kernel;
    g_arena->Open();
  }
  ~OpenWhileRunning() { g_arena->Close(); }
};
using GuardedKernels = cpu::CpuKernels<float, OpenWhileRunning>;

void OnFault(int, siginfo_t *info, void *) {
  if (g_arena && g_arena->Holds(info->si_addr)) {
    const char msg[] = "a layer touched a tensor outside the backend, after kernel ";
    (void)!write(2, msg, sizeof(msg) - 1);
    (void)!write(2, g_kernel, strlen(g_kernel));
    (void)!write(2, "\n", 1);
    _exit(3);
  }
  signal(SIGSEGV, SIG_DFL);
  raise(SIGSEGV);
}

enum class Pass { kWhole, kZeroBubbleRecompute };

// One chain of layers (the last a loss) with every tensor in an arena.
struct Chain {
  ParamRegistry registry;
  std::vector<std::unique_ptr<Layer<float>>> layers;
  std::unique_ptr<ParamStore<float>> store;
  int64_t B = 2, T = 8, in_width = 0;  // in_width: 0 for a GPT (tokens)
  int64_t classes = 0;                 // targets in [0, classes) (0: none)
  bool mse = false;                    // labels [B * T, width of the last layer's input]
};

std::unique_ptr<Chain> TinyGpt() {
  auto chain = std::make_unique<Chain>();
  GptDims dims{/*vocab=*/32, /*n_ctx=*/8, /*n_layer=*/2, /*n_head=*/2, /*d_model=*/16};
  auto embedding = std::make_unique<GptEmbedding<float>>(dims, chain->registry);
  const int wte = embedding->wte_id();
  chain->layers.push_back(std::move(embedding));
  for (int i = 0; i < 2; ++i)
    chain->layers.push_back(std::make_unique<GptBlock<float>>(dims, i, chain->registry));
  chain->layers.push_back(std::make_unique<GptHead<float>>(dims, wte, chain->registry));
  chain->classes = dims.vocab;
  return chain;
}

std::unique_ptr<Chain> TinySequential(bool mse) {
  using Fn = ActivationLayer<float>::Fn;
  auto chain = std::make_unique<Chain>();
  chain->T = 1;
  chain->B = 6;
  chain->in_width = 8;
  ParamRegistry &r = chain->registry;
  chain->layers.push_back(std::make_unique<LinearLayer<float>>("l0", 8, 16, true, r));
  chain->layers.push_back(std::make_unique<ActivationLayer<float>>(Fn::kGelu, 16));
  chain->layers.push_back(std::make_unique<LayerNormLayer<float>>("ln", 16, r));
  chain->layers.push_back(std::make_unique<LinearLayer<float>>("l1", 16, 4, false, r));
  chain->layers.push_back(std::make_unique<ActivationLayer<float>>(Fn::kRelu, 4));
  if (mse) {
    chain->layers.push_back(std::make_unique<MseLossLayer<float>>(4));
    chain->mse = true;
  } else {
    chain->layers.push_back(std::make_unique<CrossEntropyLossLayer<float>>(4));
    chain->classes = 4;
  }
  return chain;
}

struct Outcome {
  double loss = 0;
  std::vector<float> grads;
  std::vector<float> input_grad;  // of the first layer that has an input (sequential)
  std::string error;              // set up or a layer failed
};

// Runs forward and backward of `chain` with `kernels`, every tensor in
// `arena`; with `guard`, the arena is closed around the passes.
Outcome Run(Chain &chain, const Kernels<float> &kernels, Arena &arena, bool guard, Pass pass) {
  const size_t L = chain.layers.size();
  const int64_t N = chain.B * chain.T;
  ParamStore<float> &store = *chain.store;
  const ActivationLimits limits{chain.B, chain.T, omp_get_max_threads()};

  float *values = arena.Take<float>(store.padded_size());
  float *grads = arena.Take<float>(store.padded_size());
  std::memcpy(values, store.values(), size_t(store.padded_size()) * sizeof(float));
  std::memset(grads, 0, size_t(store.padded_size()) * sizeof(float));
  for (size_t id = 0; id < store.decls().size(); ++id) {
    store.SetParamPointer(int(id), values + store.decls()[id].offset);
    store.SetGradPointer(int(id), grads + store.decls()[id].offset);
  }

  std::mt19937 rng(5);
  MicroBatch<float> mb;
  mb.B = chain.B;
  mb.seq = chain.T;
  mb.max_threads = limits.max_threads;
  mb.kernels = &kernels;
  int32_t *ids = arena.Take<int32_t>(2 * N);  // tokens | targets
  for (int64_t i = 0; i < 2 * N; ++i)
    ids[i] = int32_t(rng() % uint32_t(chain.classes > 0 ? chain.classes : 1));
  ids[N + 1] = -1;  // one ignored target
  mb.tokens = ids;
  mb.targets = chain.classes > 0 ? ids + N : nullptr;
  std::normal_distribution<float> normal;
  if (chain.in_width > 0) {
    float *inputs = arena.Take<float>(N * chain.in_width);
    for (int64_t i = 0; i < N * chain.in_width; ++i) inputs[i] = normal(rng);
    mb.inputs = inputs;
  }
  if (chain.mse) {
    const int64_t width = chain.layers[L - 2]->OutWidth();
    float *labels = arena.Take<float>(N * width);
    for (int64_t i = 0; i < N * width; ++i) labels[i] = normal(rng);
    mb.labels = labels;
  }

  int64_t scratch = 0;
  std::vector<LayerActivations<float>> acts(L), deferred(L);
  std::vector<float *> out_grads(L, nullptr);  // gradient of layer i's output [N, OutWidth]
  for (size_t i = 0; i < L; ++i) {
    Layer<float> &layer = *chain.layers[i];
    layer.Bind(&store);
    for (const SavedTensorSpec &t : layer.SavedTensors(limits))
      acts[i].tensors.push_back(arena.Take<float>(t.numel));
    for (const SavedTensorSpec &t : layer.DeferredTensors(limits))
      deferred[i].tensors.push_back(arena.Take<float>(t.numel));
    scratch = std::max(scratch, layer.ScratchSize(limits));
    if (layer.OutWidth() > 0) out_grads[i] = arena.Take<float>(N * layer.OutWidth());
  }
  float *input_grad = chain.in_width > 0 ? arena.Take<float>(N * chain.in_width) : nullptr;
  mb.scratch = arena.Take<float>(std::max<int64_t>(scratch, 1));
  Outcome outcome;
  if (mb.scratch == nullptr) {
    outcome.error = "the arena is too small";
    return outcome;
  }
  auto in_of = [&](size_t i) -> const float * { return i == 0 ? mb.inputs : acts[i - 1][0]; };
  auto din_of = [&](size_t i) { return i == 0 ? input_grad : out_grads[i - 1]; };

  if (guard) arena.Close();
  for (size_t i = 0; i < L; ++i) chain.layers[i]->Forward(in_of(i), acts[i], mb);
  if (pass == Pass::kWhole) {
    for (size_t i = L; i-- > 0;)
      chain.layers[i]->Backward(in_of(i), acts[i], out_grads[i], din_of(i), mb);
  } else {
    for (size_t i = L; i-- > 0;) {
      chain.layers[i]->RecomputeSaved(in_of(i), acts[i], mb);
      chain.layers[i]->BackwardInput(in_of(i), acts[i], out_grads[i], din_of(i), deferred[i], mb);
    }
    for (size_t i = 0; i < L; ++i)
      chain.layers[i]->BackwardWeight(in_of(i), acts[i], deferred[i], mb);
  }
  if (guard) arena.Open();

  outcome.loss = acts[L - 1].loss;
  outcome.grads.assign(grads, grads + store.size());
  if (input_grad) outcome.input_grad.assign(input_grad, input_grad + N * chain.in_width);
  for (auto &layer : chain.layers) {
    Status st = layer->TakeError();
    if (!st.ok()) outcome.error = st.message();
  }
  return outcome;
}

// The chain's run with its tensors closed to the host against the open run:
// no fault, the same loss and the same gradient bits. Exits 0 when so
// (run as a death test: a fault ends the process).
void GuardedRunMatches(std::unique_ptr<Chain> (*make)(), Pass pass) {
  std::unique_ptr<Chain> open_chain = make(), guarded_chain = make();
  for (Chain *c : {open_chain.get(), guarded_chain.get()}) {
    c->store = std::make_unique<ParamStore<float>>(c->registry, nullptr);
    c->store->Initialize(11);
  }
  Arena open_arena(64 << 20), guarded_arena(64 << 20);
  const Outcome want = Run(*open_chain, HostKernels<float>(), open_arena, false, pass);

  struct sigaction action {};
  action.sa_sigaction = OnFault;
  action.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &action, nullptr);
  g_arena = &guarded_arena;
  GuardedKernels guarded;
  const Outcome got = Run(*guarded_chain, guarded, guarded_arena, true, pass);
  g_arena = nullptr;

  if (!want.error.empty() || !got.error.empty()) {
    fprintf(stderr, "%s%s\n", want.error.c_str(), got.error.c_str());
    _exit(1);
  }
  bool same = want.loss == got.loss && want.grads == got.grads && want.input_grad == got.input_grad;
  if (!same) {
    fprintf(stderr, "the guarded run differs: loss %.9g vs %.9g\n", got.loss, want.loss);
    _exit(1);
  }
  if (!(want.loss > 0) || want.grads.empty()) {
    fprintf(stderr, "the open run computed nothing (loss %.9g)\n", want.loss);
    _exit(1);
  }
  _exit(0);
}

std::unique_ptr<Chain> Mse() {
  return TinySequential(true);
}
std::unique_ptr<Chain> CrossEntropy() {
  return TinySequential(false);
}

class KernelSeam : public ::testing::Test {
 protected:
  // The death test re-runs this test alone in a fresh process (OpenMP's
  // threads do not survive a fork).
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(KernelSeam, GptLayersTouchTheirTensorsOnlyThroughTheBackend) {
  EXPECT_EXIT(GuardedRunMatches(TinyGpt, Pass::kWhole), ::testing::ExitedWithCode(0), "");
}

TEST_F(KernelSeam, GptZeroBubbleHalvesAndRecomputationToo) {
  EXPECT_EXIT(GuardedRunMatches(TinyGpt, Pass::kZeroBubbleRecompute), ::testing::ExitedWithCode(0),
              "");
}

TEST_F(KernelSeam, SequentialLayersTouchTheirTensorsOnlyThroughTheBackend) {
  EXPECT_EXIT(GuardedRunMatches(Mse, Pass::kWhole), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(GuardedRunMatches(CrossEntropy, Pass::kZeroBubbleRecompute),
              ::testing::ExitedWithCode(0), "");
}

// The guard itself works: a host write into the closed arena is caught and
// named (the test above would pass vacuously without it).
TEST_F(KernelSeam, AHostTouchOfAClosedTensorIsCaught) {
  auto touch = [] {
    Arena arena(1 << 16);
    float *x = arena.Take<float>(16);
    struct sigaction action {};
    action.sa_sigaction = OnFault;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &action, nullptr);
    g_arena = &arena;
    GuardedKernels guarded;
    arena.Close();
    guarded.Zero(16, x);                           // through the backend: fine
    *static_cast<volatile float *>(x + 3) = 1.0f;  // the host itself: faults
    _exit(0);
  };
  EXPECT_EXIT(touch(), ::testing::ExitedWithCode(3), "outside the backend, after kernel Zero");
}

// The activation store's 16-bit stash converts through the backend too:
// kept in 16 bits after the forward, widened before the backward.
std::vector<std::string> g_calls;
struct Record {
  explicit Record(const char *kernel) { g_calls.emplace_back(kernel); }
};

TEST(KernelSeamStore, The16BitStashConvertsThroughTheBackend) {
  LayerSaveSpec layer;
  layer.tensors = {{64}, {8, /*exact=*/true}};
  layer.first_is_output = true;
  ActivationOptions options;
  options.half = Half::kBf16;
  options.slots = 2;
  ActivationStore<float> store({layer, layer}, options, nullptr);
  cpu::CpuKernels<float, Record> kernels;
  std::vector<float> want(64);
  for (int slot = 0; slot < 2; ++slot) {  // both slots' layer 0 share one fp32 region
    float *out = store.at(slot, 0)[0];
    for (int i = 0; i < 64; ++i) out[i] = 1.0f + float(i + 100 * slot) / 3.0f;
    if (slot == 0) want.assign(out, out + 64);
    store.AfterForward(slot, 0, kernels);
  }
  store.Restore(0, 0, kernels);  // slot 1 overwrote the region: slot 0's values come back
  EXPECT_EQ(g_calls, (std::vector<std::string>{"StashTo16", "StashTo16", "UnstashFrom16"}));
  const float *back = store.at(0, 0)[0];
  int rounded_away = 0;  // values 1 + i/3 mostly need more than bf16's 8 bits
  for (int i = 0; i < 64; ++i) {
    uint16_t h;
    float rounded;
    FromFloat(Half::kBf16, &want[size_t(i)], &h, 1);
    ToFloat(Half::kBf16, &h, &rounded, 1);
    ASSERT_EQ(back[i], rounded) << i;
    rounded_away += back[i] != want[size_t(i)];
  }
  EXPECT_GT(rounded_away, 32);
}

}  // namespace
}  // namespace dst
