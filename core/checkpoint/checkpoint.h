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

// The consolidated fp32 weights of a checkpoint tag, every tensor whole.
inline constexpr char kModelFile[] = "model.safetensors";

struct LoadedCheckpoint {
  std::string tag;
  std::string path;  // DIR/TAG
  nlohmann::json meta;
  std::map<std::string, SafetensorsFile> files;
};

// A tag is one path component: letters, digits, '.', '_', '-'; not "." or "..".
Status ValidateTag(const std::string &tag);

// A file written into a staging directory: what meta.json records of it.
struct WrittenFile {
  std::string name;
  uint64_t bytes = 0;
  std::string checksum;
};

// Writing a checkpoint that several ranks contribute files to, in three steps:
//   rank 0:     PrepareStaging   -> a fresh DIR/.TAG.tmp (any leftover removed)
//   every rank: WriteStagedFile  -> its files, fsynced, with their checksums
//   rank 0:     CommitStaging    -> meta.json listing every file, fsync, rename
//               to DIR/TAG (a previous DIR/TAG is replaced only once the new one
//               is complete), then DIR/latest.
// A crash at any point before the rename leaves DIR/TAG and DIR/latest as
// they were. AbortStaging removes the staging directory.
std::string StagingPath(const std::string &dir, const std::string &tag);
Status PrepareStaging(const std::string &dir, const std::string &tag);
Result<WrittenFile> WriteStagedFile(const std::string &dir, const std::string &tag,
                                    const CheckpointFile &file);
Status CommitStaging(const std::string &dir, const std::string &tag,
                     const std::vector<WrittenFile> &files, nlohmann::json meta);
void AbortStaging(const std::string &dir, const std::string &tag);

// One process writes everything: the three steps above in a row.
Status WriteCheckpoint(const std::string &dir, const std::string &tag,
                       const std::vector<CheckpointFile> &files, nlohmann::json meta);

// Reads DIR/TAG's meta.json (tag empty: the tag in DIR/latest) and checks the
// format; no data file is read (LoadCheckpointFile reads them one by one).
Result<LoadedCheckpoint> ReadCheckpointMeta(const std::string &dir, const std::string &tag);
// Verifies the size and checksum meta.json lists for `name`, then reads it
// into ckpt->files. Errors name the file.
Status LoadCheckpointFile(LoadedCheckpoint *ckpt, const std::string &name);

// Reads DIR/TAG and every file listed in meta.json, verifying sizes and
// checksums. Errors name the file.
Result<LoadedCheckpoint> ReadCheckpoint(const std::string &dir, const std::string &tag);

// 64-bit checksum of a file's bytes (hex string), or an I/O error.
Result<std::string> FileChecksum(const std::string &path, uint64_t *size_out);

}  // namespace dst
