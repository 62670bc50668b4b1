// Memory the host cannot touch, standing in for a device in the seam tests
// (tests/unit/test_kernel_seam.cc: the layers; test_step_seam.cc: the whole
// training step): page-aligned memory mapped without access while closed.
// The guarded backends (cpu::CpuKernels / CpuStepKernels with the
// OpenWhileRunning scope) open it only while one of their kernels runs, and
// the arena's own copies (Upload, Download, Zero: a device's copies) open it
// while they copy. Any other host read or write faults; the fault handler
// names the last kernel that ran and exits with code 3. Death tests only:
// the guard is process-wide.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>

#include "core/kernels/cpu/cpu_kernels.h"
#include "core/kernels/cpu/cpu_step_kernels.h"
#include "tests/common/layer_chain.h"

namespace dst {

class Arena final : public TensorMemory {
 public:
  explicit Arena(size_t bytes) : bytes_((bytes + 4095) / 4096 * 4096) {
    base_ = static_cast<char *>(
        mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) base_ = nullptr;
  }
  ~Arena() override {
    if (base_) munmap(base_, bytes_);
  }
  Arena(const Arena &) = delete;
  Arena &operator=(const Arena &) = delete;

  void *TakeBytes(size_t bytes) override {
    if (base_ == nullptr || used_ + bytes > bytes_) return nullptr;
    void *p = base_ + used_;
    used_ += (bytes + 63) / 64 * 64;
    return p;
  }
  void Upload(void *dst, const void *src, size_t bytes) override {
    const Opened open(*this);
    std::memcpy(dst, src, bytes);
  }
  void Download(void *dst, const void *src, size_t bytes) override {
    const Opened open(*this);
    std::memcpy(dst, src, bytes);
  }
  std::string_view name() const override { return "guarded"; }
  void Zero(void *dst, size_t bytes) override {
    const Opened open(*this);
    std::memset(dst, 0, bytes);
  }
  void Open() const {
    mprotect(base_, bytes_, PROT_READ | PROT_WRITE);
    open_ = true;
  }
  void Close() const {
    mprotect(base_, bytes_, PROT_NONE);
    open_ = false;
  }
  bool is_open() const { return open_; }
  bool Holds(const void *p) const {
    const char *c = static_cast<const char *>(p);
    return c >= base_ && c < base_ + bytes_;
  }

  // Open for a scope, then as it was.
  class Opened {
   public:
    explicit Opened(const Arena &arena) : arena_(arena), was_open_(arena.is_open()) {
      if (!was_open_) arena_.Open();
    }
    ~Opened() {
      if (!was_open_) arena_.Close();
    }

   private:
    const Arena &arena_;
    bool was_open_;
  };

 private:
  size_t bytes_;
  char *base_ = nullptr;
  size_t used_ = 0;
  mutable bool open_ = true;
};

// The guarded backends' state: the arena they open and the last kernel run.
inline const Arena *g_arena = nullptr;
inline const char *g_kernel = "(none)";

struct OpenWhileRunning {
  explicit OpenWhileRunning(const char *kernel) : open(*g_arena) { g_kernel = kernel; }
  Arena::Opened open;
};
using GuardedKernels = cpu::CpuKernels<float, OpenWhileRunning>;
using GuardedStepKernels = cpu::CpuStepKernels<OpenWhileRunning>;

inline void OnFault(int, siginfo_t *info, void *) {
  if (g_arena && g_arena->Holds(info->si_addr)) {
    const char msg[] = "host code touched a tensor outside the backend, after kernel ";
    (void)!write(2, msg, sizeof(msg) - 1);
    (void)!write(2, g_kernel, strlen(g_kernel));
    (void)!write(2, "\n", 1);
    _exit(3);
  }
  signal(SIGSEGV, SIG_DFL);
  raise(SIGSEGV);
}

// The guarded backends open `arena`; a fault inside it is reported (OnFault).
inline void GuardArena(const Arena *arena) {
  struct sigaction action {};
  action.sa_sigaction = OnFault;
  action.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &action, nullptr);
  g_arena = arena;
}

// Runs a case's passes with `arena` closed to the host.
inline std::function<void(const std::function<void()> &)> ClosedAround(const Arena &arena) {
  return [&arena](const std::function<void()> &passes) {
    arena.Close();
    passes();
    arena.Open();
  };
}

}  // namespace dst
