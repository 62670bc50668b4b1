#include "core/checkpoint/checkpoint.h"

#include "core/checkpoint/checksum.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dst {

namespace fs = std::filesystem;

namespace {

constexpr const char *kMetaFile = "meta.json";
constexpr const char *kLatestFile = "latest";
constexpr const char *kFormat = "dstrain-checkpoint";
// 2: per-rank optimizer shards (flat ranges); 3: meta.json protected by
// meta.json.sum (version 2 checkpoints still load, without that check).
constexpr int kFormatVersion = 3;
constexpr int kOldestFormatVersion = 2;
constexpr const char *kMetaSumFile = "meta.json.sum";

std::string TextChecksum(const std::string &text) {
  Checksum64 sum;
  sum.Update(reinterpret_cast<const unsigned char *>(text.data()), text.size());
  return sum.Hex();
}

std::string ErrnoText() {
  return std::strerror(errno);
}

Status FsyncPath(const std::string &path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return IoError("cannot open " + path + " to sync it: " + ErrnoText());
  const int rc = ::fsync(fd);
  const std::string err = rc != 0 ? ErrnoText() : "";
  ::close(fd);
  if (rc != 0) return IoError("fsync of " + path + " failed: " + err);
  return Status::Ok();
}

Status WriteTextFile(const std::string &path, const std::string &text) {
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) return IoError("cannot create " + path + ": " + ErrnoText());
  const size_t written = std::fwrite(text.data(), 1, text.size(), f);
  const bool flushed = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const std::string err = ErrnoText();
  std::fclose(f);
  if (written != text.size() || !flushed)
    return IoError("cannot write " + path + ": " + err + " (is the disk full?)");
  return Status::Ok();
}

Result<std::string> ReadTextFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot read " + path + ": " + ErrnoText());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Replaces `target` by the directory `staged`: the old one (if any) is moved
// aside first and removed only after the new one is in place.
Status SwapDirectoryIntoPlace(const std::string &staged, const std::string &target) {
  std::error_code ec;
  const std::string old = target + ".old";
  fs::remove_all(old, ec);
  const bool had_old = fs::exists(target);
  if (had_old) {
    fs::rename(target, old, ec);
    if (ec) return IoError("cannot move " + target + " aside: " + ec.message());
  }
  fs::rename(staged, target, ec);
  if (ec) {
    if (had_old) fs::rename(old, target, ec);
    return IoError("cannot rename " + staged + " to " + target + ": " + ec.message());
  }
  fs::remove_all(old, ec);
  return Status::Ok();
}

}  // namespace

Status ValidateTag(const std::string &tag) {
  if (tag.empty() || tag == "." || tag == ".." || tag.size() > 200)
    return InvalidArgument("checkpoint tag \"" + tag +
                           "\" is not a valid directory name; use e.g. \"global_step100\"");
  for (char c : tag) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (!ok)
      return InvalidArgument("checkpoint tag \"" + tag + "\" contains '" + std::string(1, c) +
                             "'; use letters, digits, '.', '_' and '-' only");
  }
  // Names the checkpoint directory itself uses: "latest" (the pointer file),
  // hidden ".TAG.tmp" staging directories.
  if (tag == kLatestFile || tag.front() == '.' ||
      (tag.size() >= 4 && tag.compare(tag.size() - 4, 4, ".tmp") == 0))
    return InvalidArgument("checkpoint tag \"" + tag +
                           "\" is reserved (\"latest\", names beginning with '.' and ending "
                           "in '.tmp' are the checkpoint directory's own); use e.g. "
                           "\"global_step100\"");
  return Status::Ok();
}

Result<std::string> FileChecksum(const std::string &path, uint64_t *size_out) {
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) return IoError("cannot read " + path + ": " + ErrnoText());
  Checksum64 sum;
  std::vector<unsigned char> block(1 << 20);
  size_t got;
  while ((got = std::fread(block.data(), 1, block.size(), f)) > 0) sum.Update(block.data(), got);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return IoError("read error in " + path);
  if (size_out) *size_out = sum.bytes();
  return sum.Hex();
}

std::string StagingPath(const std::string &dir, const std::string &tag) {
  return (fs::path(dir) / ("." + tag + ".tmp")).string();
}

Status PrepareStaging(const std::string &dir, const std::string &tag) {
  DST_RETURN_IF_ERROR(ValidateTag(tag));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create checkpoint directory " + dir + ": " + ec.message());
  const std::string staged = StagingPath(dir, tag);
  fs::remove_all(staged, ec);
  fs::create_directory(staged, ec);
  if (ec) return IoError("cannot create " + staged + ": " + ec.message());
  return Status::Ok();
}

Result<WrittenFile> WriteStagedFile(const std::string &dir, const std::string &tag,
                                    const CheckpointFile &file) {
  const std::string path = (fs::path(StagingPath(dir, tag)) / file.name).string();
  WrittenFile written;
  written.name = file.name;
  Checksum64 sum;  // of the bytes as written: no second pass over the file
  Status st = WriteSafetensors(path, file.tensors, file.metadata, &sum);
  if (!st.ok())
    return Status(st.code(), "saving checkpoint " + tag + ": " + st.message() +
                                 "; nothing was committed (" + dir +
                                 "/latest still names the previous checkpoint)" +
                                 (st.message().find("No space left") != std::string::npos
                                      ? ": free space on that disk and save again"
                                      : ""));
  written.bytes = sum.bytes();
  written.checksum = sum.Hex();
  return written;
}

void AbortStaging(const std::string &dir, const std::string &tag) {
  std::error_code ec;
  fs::remove_all(StagingPath(dir, tag), ec);
}

Status CommitStaging(const std::string &dir, const std::string &tag,
                     const std::vector<WrittenFile> &files, nlohmann::json meta) {
  const std::string staged = StagingPath(dir, tag);
  meta["format"] = kFormat;
  meta["format_version"] = kFormatVersion;
  meta["tag"] = tag;
  nlohmann::json listed = nlohmann::json::object();
  for (const WrittenFile &f : files)
    listed[f.name] = {{"bytes", f.bytes}, {"checksum", f.checksum}};
  meta["files"] = listed;
  const std::string meta_text = meta.dump(2);
  Status st = WriteTextFile((fs::path(staged) / kMetaFile).string(), meta_text);
  // The checksum of meta.json lives in a file of its own, so an edit of
  // meta.json (the step, the optimizer's step count, the seeds) cannot also
  // make the checksum agree.
  if (st.ok())
    st = WriteTextFile((fs::path(staged) / kMetaSumFile).string(),
                       TextChecksum(meta_text) + "  " + kMetaFile + "\n");
  if (st.ok()) st = FsyncPath(staged, true);
  if (st.ok()) st = SwapDirectoryIntoPlace(staged, (fs::path(dir) / tag).string());
  if (!st.ok()) {
    AbortStaging(dir, tag);
    return st.context("saving checkpoint " + tag);
  }
  std::error_code ec;
  const std::string latest_tmp = (fs::path(dir) / ".latest.tmp").string();
  DST_RETURN_IF_ERROR(WriteTextFile(latest_tmp, tag));
  fs::rename(latest_tmp, fs::path(dir) / kLatestFile, ec);
  if (ec) return IoError("cannot update " + dir + "/latest: " + ec.message());
  return FsyncPath(dir, true);
}

Status WriteCheckpoint(const std::string &dir, const std::string &tag,
                       const std::vector<CheckpointFile> &files, nlohmann::json meta) {
  DST_RETURN_IF_ERROR(PrepareStaging(dir, tag));
  std::vector<WrittenFile> written;
  for (const CheckpointFile &file : files) {
    Result<WrittenFile> w = WriteStagedFile(dir, tag, file);
    if (!w.ok()) {
      AbortStaging(dir, tag);
      return w.status();
    }
    written.push_back(std::move(w).value());
  }
  return CommitStaging(dir, tag, written, std::move(meta));
}

namespace {

Result<std::string> ResolveTag(const std::string &dir, const std::string &tag) {
  if (!tag.empty()) return tag;
  const std::string latest = (fs::path(dir) / kLatestFile).string();
  if (!fs::exists(latest)) {
    if (!fs::exists(dir)) return IoError("checkpoint directory " + dir + " does not exist");
    return CheckpointError("no '" + std::string(kLatestFile) + "' file in " + dir +
                           "; pass the tag to load, or check the directory");
  }
  Result<std::string> text = ReadTextFile(latest);
  if (!text.ok()) return text.status();
  std::string name = text.value();
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  return name;
}

}  // namespace

Result<LoadedCheckpoint> ReadCheckpointMeta(const std::string &dir, const std::string &tag) {
  Result<std::string> resolved = ResolveTag(dir, tag);
  if (!resolved.ok()) return resolved.status();
  DST_RETURN_IF_ERROR(ValidateTag(resolved.value()).context("loading checkpoint from " + dir));
  LoadedCheckpoint ckpt;
  ckpt.tag = resolved.value();
  ckpt.path = (fs::path(dir) / ckpt.tag).string();
  if (!fs::is_directory(ckpt.path))
    return CheckpointError("checkpoint " + ckpt.path + " does not exist");
  const std::string meta_path = (fs::path(ckpt.path) / kMetaFile).string();
  Result<std::string> meta_text = ReadTextFile(meta_path);
  if (!meta_text.ok()) return CheckpointError(meta_text.status().message());
  const std::string sum_path = (fs::path(ckpt.path) / kMetaSumFile).string();
  const bool has_sum = fs::exists(sum_path);
  if (has_sum) {
    Result<std::string> sum_text = ReadTextFile(sum_path);
    if (!sum_text.ok()) return CheckpointError(sum_text.status().message());
    const std::string saved = sum_text.value().substr(0, sum_text.value().find(' '));
    const std::string now = TextChecksum(meta_text.value());
    if (saved != now)
      return CheckpointError(meta_path + " does not match the checksum saved with it in " +
                             sum_path + " (" + saved + ", now " + now +
                             "): it was edited or damaged. It decides the step, the optimizer's "
                             "step count, the LR schedule and the seeds, so it is not loaded; "
                             "restore it, or load another tag");
  }
  try {
    ckpt.meta = nlohmann::json::parse(meta_text.value());
  } catch (const nlohmann::json::exception &e) {
    return CheckpointError(meta_path + " is not valid JSON (" + e.what() +
                           "): the file is corrupt");
  }
  try {
    if (!ckpt.meta.is_object() || ckpt.meta.value("format", "") != kFormat)
      return CheckpointError(meta_path + " is not a dstrain checkpoint (format \"" +
                             (ckpt.meta.is_object() ? ckpt.meta.value("format", "") : "") + "\")");
    const int version = ckpt.meta.value("format_version", 0);
    if (version < kOldestFormatVersion || version > kFormatVersion)
      return CheckpointError(meta_path + " has format_version " +
                             ckpt.meta["format_version"].dump() + "; this build reads versions " +
                             std::to_string(kOldestFormatVersion) + "-" +
                             std::to_string(kFormatVersion));
    if (version >= 3 && !has_sum)
      return CheckpointError(sum_path + " is missing: a format " + std::to_string(version) +
                             " checkpoint keeps meta.json's checksum there, so meta.json "
                             "cannot be verified; restore the file, or load another tag");
    if (!ckpt.meta.at("files").is_object())
      return CheckpointError(meta_path + ": \"files\" is not an object");
  } catch (const nlohmann::json::exception &e) {
    return CheckpointError(meta_path + " is missing fields or has wrong types (" + e.what() + ")");
  }
  return ckpt;
}

Status LoadCheckpointFile(LoadedCheckpoint *ckpt, const std::string &name) {
  if (ckpt->files.count(name)) return Status::Ok();
  const nlohmann::json &listed = ckpt->meta.at("files");
  if (!listed.contains(name))
    return CheckpointError(ckpt->path + "/meta.json does not list " + name +
                           ": the checkpoint is incomplete");
  const std::string path = (fs::path(ckpt->path) / name).string();
  const nlohmann::json &entry = listed.at(name);
  if (!entry.is_object() || !entry.contains("bytes") || !entry.contains("checksum") ||
      !entry["bytes"].is_number_unsigned() || !entry["checksum"].is_string())
    return CheckpointError(ckpt->path + "/meta.json has no size/checksum for " + name);
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return CheckpointError("cannot read " + path + ": " + ec.message());
  if (entry["bytes"].get<uint64_t>() != size)
    return CheckpointError(path + " is " + std::to_string(size) + " bytes but was saved with " +
                           entry["bytes"].dump() + ": the file is truncated or was replaced");
  // One read: the checksum is taken over the bytes as they are parsed.
  Checksum64 sum;
  Result<SafetensorsFile> file = ReadSafetensors(path, &sum);
  const std::string saved = entry["checksum"].get<std::string>();
  if (!file.ok() || sum.bytes() != size || sum.Hex() != saved) {
    std::string now = sum.Hex();
    if (!file.ok()) {  // the parse stopped early: checksum the whole file
      Result<std::string> whole = FileChecksum(path, nullptr);
      now = whole.ok() ? whole.value() : "unreadable";
    }
    if (now != saved)
      return CheckpointError(path + " fails its checksum (saved " + saved + ", now " + now +
                             "): the file is corrupt; restore it or load another tag");
    if (!file.ok()) return CheckpointError(file.status().message());
  }
  ckpt->files.emplace(name, std::move(file).value());
  return Status::Ok();
}

Result<LoadedCheckpoint> ReadCheckpoint(const std::string &dir, const std::string &tag) {
  Result<LoadedCheckpoint> ckpt = ReadCheckpointMeta(dir, tag);
  if (!ckpt.ok()) return ckpt.status();
  std::vector<std::string> names;
  for (const auto &item : ckpt->meta.at("files").items()) names.push_back(item.key());
  for (const std::string &name : names)
    DST_RETURN_IF_ERROR(LoadCheckpointFile(&ckpt.value(), name));
  return ckpt;
}

}  // namespace dst
