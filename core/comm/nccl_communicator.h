// The NCCL backend: GPU collectives, symmetric with the Gloo one. Rank 0's
// ncclUniqueId goes through the same rendezvous Store; each collective is
// enqueued on the communicator's CUDA stream and its Work waits on an event,
// polling so that a stalled peer ends in a timeout (and ncclCommAbort) rather
// than a hang. Buffers are device pointers. The backend is a plugin
// (libdstrain_nccl.so, built only when the CUDA toolkit and NCCL are found)
// loaded on first use; nothing on a CPU machine runs it.
#pragma once

#include <memory>
#include <string>

#include "core/comm/communicator.h"
#include "core/comm/gloo_communicator.h"  // GlooOptions doubles as the group description
#include "core/comm/store.h"

namespace dst {

using NcclOptions = GlooOptions;  // name, rank, size, timeout (hosts are unused)

// True when the NCCL plugin is built and loads (CUDA runtime and NCCL present).
bool NcclAvailable();
// Why it is not available ("" when it is).
std::string NcclUnavailableReason();

// Connects the group on the current CUDA device. kNotSupported when built
// without NCCL; kComm when there is no device or NCCL fails (named).
Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(Store &store,
                                                             const NcclOptions &options);

}  // namespace dst
