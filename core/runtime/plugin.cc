#include "core/runtime/plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace dst {

namespace {

std::vector<std::string> Candidates(const PluginSpec &spec) {
  std::vector<std::string> out;
  if (const char *env = std::getenv(spec.env_var); env && *env) out.push_back(env);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&Candidates), &info) && info.dli_fname) {
    const std::filesystem::path self = std::filesystem::absolute(info.dli_fname).parent_path();
    out.push_back((self / spec.file_name).string());
    out.push_back((self.parent_path() / spec.file_name).string());
  }
  if (spec.build_path != nullptr) out.push_back(spec.build_path);
  return out;
}

}  // namespace

OpenedPlugin OpenPlugin(const PluginSpec &spec) {
  OpenedPlugin plugin;
  std::string tried;
  for (const std::string &path : Candidates(spec)) {
    if (!std::filesystem::exists(path)) continue;
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open for the process
    if (!handle) {
      tried += std::string(tried.empty() ? "" : "; ") + dlerror();
      continue;
    }
    plugin.entry = dlsym(handle, spec.entry_point);
    if (plugin.entry) {
      plugin.handle = handle;
      return plugin;
    }
    tried += std::string(tried.empty() ? "" : "; ") + path + " has no " + spec.entry_point;
  }
  plugin.error = "the plugin " + std::string(spec.file_name) +
                 (tried.empty() ? " was not found next to libdstrain.so (set " +
                                      std::string(spec.env_var) + " to its path)"
                                : " could not be loaded: " + tried) +
                 " (it needs " + spec.needs + ")";
  return plugin;
}

}  // namespace dst
