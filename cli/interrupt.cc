#include "interrupt.h"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <thread>

namespace dstrain_cli {
namespace {

std::atomic<bool> g_interrupted{false};

sigset_t InterruptSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  return set;
}

// The only place SIGINT is ever delivered: the first one sets the flag; the
// second restores the default action and raises it here, where it is
// unblocked, so the process dies of it.
void WaitForInterrupts() {
  const sigset_t set = InterruptSignals();
  int signal = 0;
  while (sigwait(&set, &signal) != 0 || signal != SIGINT) {
  }
  g_interrupted = true;
  while (sigwait(&set, &signal) != 0 || signal != SIGINT) {
  }
  std::signal(SIGINT, SIG_DFL);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  std::raise(SIGINT);
}

}  // namespace

void InstallInterruptHandler() {
  // Blocked here, before the engine starts its threads (they inherit the
  // mask): a Ctrl-C never lands in a kernel, a collective or a system call
  // of the engine, only in the waiting thread.
  const sigset_t set = InterruptSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(WaitForInterrupts).detach();
}

bool InterruptRequested() {
  return g_interrupted.load();
}

}  // namespace dstrain_cli
