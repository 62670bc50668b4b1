// Ctrl-C handling: the first SIGINT only sets a flag, so that the current step
// can finish and a checkpoint can be saved; a second SIGINT kills the process.
// SIGINT is blocked in every thread of the process and taken by one waiting
// thread (sigwait), so it never interrupts the engine's own threads (an
// asynchronous handler did: rare heap corruption on Ctrl-C under load).
#pragma once

namespace dstrain_cli {

void InstallInterruptHandler();
bool InterruptRequested();

}  // namespace dstrain_cli
