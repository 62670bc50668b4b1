// Checkpoint directories: DIR/TAG/ holds safetensors files and meta.json, and
// DIR/latest names the newest tag (DeepSpeed's layout). Writes are atomic: the
// tag is written under a temporary name, every file fsynced, then renamed into
// place, so an interrupted save leaves the previous checkpoint loadable. Every
// file's size and 64-bit checksum are recorded in meta.json and verified at load.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.h"
#include "core/common/status.h"

namespace dst {

struct CheckpointFile {
  std::string name;  // e.g. "model.safetensors"
  std::vector<TensorRef> tensors;
  std::map<std::string, std::string> metadata;
};

struct LoadedCheckpoint {
  std::string tag;
  std::string path;  // DIR/TAG
  nlohmann::json meta;
  std::map<std::string, SafetensorsFile> files;
};

// A tag is one path component: letters, digits, '.', '_', '-'; not "." or "..".
Status ValidateTag(const std::string &tag);

// Writes DIR/TAG/{files..., meta.json} atomically, then DIR/latest. `meta`
// gets a "files" entry with each file's bytes and checksum.
Status WriteCheckpoint(const std::string &dir, const std::string &tag,
                       const std::vector<CheckpointFile> &files, nlohmann::json meta);

// Reads DIR/TAG (tag empty: the tag in DIR/latest), verifying sizes and
// checksums of every file listed in meta.json. Errors name the file.
Result<LoadedCheckpoint> ReadCheckpoint(const std::string &dir, const std::string &tag);

// 64-bit checksum of a file's bytes (hex string), or an I/O error.
Result<std::string> FileChecksum(const std::string &path, uint64_t *size_out);

}  // namespace dst
