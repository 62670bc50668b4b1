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
  if (const std::string module = ThisModulePath(); !module.empty()) {
    const std::filesystem::path self = std::filesystem::path(module).parent_path();
    out.push_back((self / spec.file_name).string());
    out.push_back((self / "dstrain" / spec.file_name).string());  // an install's lib/dstrain/
    out.push_back((self.parent_path() / spec.file_name).string());
  }
  if (spec.build_path != nullptr) out.push_back(spec.build_path);
  return out;
}

}  // namespace

std::string ThisModulePath() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void *>(&ThisModulePath), &info) || !info.dli_fname) return "";
  std::error_code error;
  const std::filesystem::path path = std::filesystem::canonical(info.dli_fname, error);
  return error ? std::filesystem::absolute(info.dli_fname).string() : path.string();
}

std::string LocatePlugin(const PluginSpec &spec) {
  for (const std::string &path : Candidates(spec))
    if (std::filesystem::exists(path)) return path;
  return "";
}

std::vector<PluginLocation> LocatePlugins() {
  struct Known {
    const char *name, *file_name, *env_var, *build_path;
    bool built;
  };
  const Known known[] = {
#ifdef DSTRAIN_SENTENCEPIECE_PLUGIN_BUILD_PATH
      {"sentencepiece", "libdstrain_sentencepiece.so", "DSTRAIN_SENTENCEPIECE_PLUGIN",
       DSTRAIN_SENTENCEPIECE_PLUGIN_BUILD_PATH, true},
#else
      {"sentencepiece", "libdstrain_sentencepiece.so", "DSTRAIN_SENTENCEPIECE_PLUGIN", nullptr,
       false},
#endif
#ifdef DSTRAIN_NCCL_PLUGIN_BUILD_PATH
      {"nccl", "libdstrain_nccl.so", "DSTRAIN_NCCL_PLUGIN", DSTRAIN_NCCL_PLUGIN_BUILD_PATH, true},
#else
      {"nccl", "libdstrain_nccl.so", "DSTRAIN_NCCL_PLUGIN", nullptr, false},
#endif
#ifdef DSTRAIN_CUDA_PLUGIN_BUILD_PATH
      {"cuda", "libdstrain_cuda.so", "DSTRAIN_CUDA_PLUGIN", DSTRAIN_CUDA_PLUGIN_BUILD_PATH, true},
#else
      {"cuda", "libdstrain_cuda.so", "DSTRAIN_CUDA_PLUGIN", nullptr, false},
#endif
  };
  std::vector<PluginLocation> out;
  for (const Known &k : known) {
    const PluginSpec spec{k.file_name, k.env_var, k.build_path, "", ""};
    out.push_back({k.name, k.file_name, LocatePlugin(spec), k.built});
  }
  return out;
}

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
