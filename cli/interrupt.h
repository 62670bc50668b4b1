// Ctrl-C handling: the first SIGINT only sets a flag, so that the current step
// can finish and a checkpoint can be saved; a second SIGINT kills the process.
#pragma once

namespace dstrain_cli {

void InstallInterruptHandler();
bool InterruptRequested();

}  // namespace dstrain_cli
