// Plugins opened with dlopen on first use (libdstrain_nccl.so, libdstrain_cuda.so),
// so that libdstrain.so loads on a machine without CUDA: one loader for all.
#pragma once

#include <string>
#include <vector>

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
// test executable), in its dstrain/ subdirectory (where an install puts the
// plugins: lib/dstrain/), in its parent directory, then the build path; the first
// that opens and exports the entry point wins (its handle stays open).
OpenedPlugin OpenPlugin(const PluginSpec &spec);

// The file OpenPlugin(spec) would try first: the first candidate that
// exists, without opening it; empty when none does.
std::string LocatePlugin(const PluginSpec &spec);

// The file holding this code: libdstrain.so (or a program it is linked into).
std::string ThisModulePath();

// Where libdstrain's plugins are found ("sentencepiece", "nccl", "cuda"),
// without opening them: what `dstrain report` shows an installed tree's user.
struct PluginLocation {
  std::string name, file_name, path;  // path empty: not found
  bool built = false;                 // this build compiles the plugin
};
std::vector<PluginLocation> LocatePlugins();

}  // namespace dst
