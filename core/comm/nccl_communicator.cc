// The NCCL backend's loader: the backend itself lives in a plugin,
// libdstrain_nccl.so (core/comm/nccl/nccl_plugin.cc), opened with dlopen on
// first use so that libdstrain.so needs neither CUDA nor NCCL to load.
#include "core/comm/nccl_communicator.h"

#include <mutex>
#include <string>

#include "core/runtime/plugin.h"

namespace dst {

namespace {

using PluginCreateFn = Communicator *(*)(Store *, const NcclOptions *, Status *);

struct Plugin {
  PluginCreateFn create = nullptr;
  std::string error;  // why it could not be loaded
};

const Plugin &LoadPlugin() {
  static Plugin plugin;
  static std::once_flag once;
  std::call_once(once, [] {
#if !DSTRAIN_HAVE_NCCL
    plugin.error =
        "this build has no NCCL backend (the CUDA toolkit and NCCL were not found "
        "when it was built)";
#else
    const OpenedPlugin opened = OpenPlugin({"libdstrain_nccl.so", "DSTRAIN_NCCL_PLUGIN", DSTRAIN_NCCL_PLUGIN_BUILD_PATH,
                                            "dst_nccl_plugin_create",
                                            "the CUDA runtime and NCCL libraries"});
    plugin.create = reinterpret_cast<PluginCreateFn>(opened.entry);
    plugin.error = opened.error;
#endif
  });
  return plugin;
}

}  // namespace

bool NcclAvailable() {
  return LoadPlugin().create != nullptr;
}

std::string NcclUnavailableReason() {
  return LoadPlugin().error;
}

Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(Store &store,
                                                             const NcclOptions &options) {
  const Plugin &plugin = LoadPlugin();
  if (!plugin.create)
    return NotSupported("group '" + options.name + "': " + plugin.error +
                        "; use the Gloo backend on CPU");
  Status status;
  Communicator *comm = plugin.create(&store, &options, &status);
  if (!comm) return status;
  return std::unique_ptr<Communicator>(comm);
}

}  // namespace dst
