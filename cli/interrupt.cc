#include "interrupt.h"

#include <csignal>

namespace dstrain_cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void OnInterrupt(int) {
  g_interrupted = 1;
}

}  // namespace

void InstallInterruptHandler() {
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;  // the second Ctrl-C gets the default action
  sigaction(SIGINT, &action, nullptr);
}

bool InterruptRequested() {
  return g_interrupted != 0;
}

}  // namespace dstrain_cli
