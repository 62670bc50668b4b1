// Plugins opened with dlopen on first use (libdstrain_nccl.so, libdstrain_cuda.so),
// so that libdstrain.so loads on a machine without CUDA: one loader for all.
#pragma once

#include <string>

namespace dst {

struct PluginSpec {
  const char *file_name;    // "libdstrain_cuda.so"
  const char *env_var;      // a path that overrides the search ("DSTRAIN_CUDA_PLUGIN")
  const char *build_path;   // where the build put it (null: none)
  const char *entry_point;  // a symbol it must export
  const char *needs;        // what it links, for the error ("the CUDA runtime")
};

struct OpenedPlugin {
  void *handle = nullptr;  // dlopen's handle (dlsym more symbols from it); null when not loaded
  void *entry = nullptr;   // the entry point's address; null when not loaded
  std::string error;       // why it could not be loaded
};

// Looks in $env_var, next to the module holding this code (libdstrain.so or a
// test executable) and its parent directory, then the build path; the first
// that opens and exports the entry point wins (its handle stays open).
OpenedPlugin OpenPlugin(const PluginSpec &spec);

}  // namespace dst
