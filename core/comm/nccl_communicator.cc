// The NCCL backend's loader: the backend itself lives in a plugin,
// libdstrain_nccl.so (core/comm/nccl/nccl_plugin.cc), opened with dlopen on
// first use so that libdstrain.so needs neither CUDA nor NCCL to load.
#include "core/comm/nccl_communicator.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace dst {

namespace {

using PluginCreateFn = Communicator *(*)(Store *, const NcclOptions *, Status *);
constexpr const char *kPluginName = "libdstrain_nccl.so";

// Where to look: $DSTRAIN_NCCL_PLUGIN, next to the module holding this code
// (libdstrain.so or a test executable), then the build tree.
std::vector<std::string> PluginCandidates() {
  std::vector<std::string> out;
  if (const char *env = std::getenv("DSTRAIN_NCCL_PLUGIN"); env && *env) out.push_back(env);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&PluginCandidates), &info) && info.dli_fname) {
    const std::filesystem::path self = std::filesystem::absolute(info.dli_fname).parent_path();
    out.push_back((self / kPluginName).string());
    out.push_back((self.parent_path() / kPluginName).string());
  }
#ifdef DSTRAIN_NCCL_PLUGIN_BUILD_PATH
  out.push_back(DSTRAIN_NCCL_PLUGIN_BUILD_PATH);
#endif
  return out;
}

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
    std::string tried;
    for (const std::string &path : PluginCandidates()) {
      if (!std::filesystem::exists(path)) continue;
      void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open for the process
      if (!handle) {
        tried += std::string(tried.empty() ? "" : "; ") + dlerror();
        continue;
      }
      plugin.create = reinterpret_cast<PluginCreateFn>(dlsym(handle, "dst_nccl_plugin_create"));
      if (plugin.create) return;
      tried += "; " + path + " has no dst_nccl_plugin_create";
    }
    plugin.error = "the NCCL plugin " + std::string(kPluginName) +
                   (tried.empty() ? " was not found next to libdstrain.so (set DSTRAIN_NCCL_PLUGIN "
                                    "to its path)"
                                  : " could not be loaded: " + tried) +
                   " (it needs the CUDA runtime and NCCL libraries)";
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
