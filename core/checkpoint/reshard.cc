#include "core/checkpoint/reshard.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace dst {

std::string ShardFileName(int64_t rank) {
  return "zero_rank_" + std::to_string(rank) + ".safetensors";
}

void CopyFlatFromTensors(const SafetensorsFile &file, const std::vector<FlatTensor> &tensors,
                         FlatRange want, float *out) {
  std::memset(out, 0, size_t(want.size()) * sizeof(float));
  for (const FlatTensor &t : tensors) {
    const int64_t begin = std::max(want.begin, t.offset);
    const int64_t end = std::min(want.end, t.offset + t.numel);
    if (begin >= end) continue;
    const float *src = file.tensors.at(t.name).f32() + (begin - t.offset);
    std::memcpy(out + (begin - want.begin), src, size_t(end - begin) * sizeof(float));
  }
}

Status AssembleFlat(const std::vector<FlatPiece> &pieces, FlatRange want, int64_t total,
                    const std::string &what, float *out) {
  std::memset(out, 0, size_t(want.size()) * sizeof(float));
  std::vector<FlatPiece> sorted = pieces;
  std::sort(sorted.begin(), sorted.end(),
            [](const FlatPiece &a, const FlatPiece &b) { return a.range.begin < b.range.begin; });
  const int64_t stop = std::min(want.end, total);
  int64_t covered = want.begin;  // everything below is filled
  for (const FlatPiece &p : sorted) {
    if (p.range.begin > covered && covered < stop) break;  // a gap
    const int64_t begin = std::max(covered, p.range.begin);
    const int64_t end = std::min(stop, p.range.end);
    if (begin >= end) continue;
    std::memcpy(out + (begin - want.begin), p.data + (begin - p.range.begin),
                size_t(end - begin) * sizeof(float));
    covered = end;
  }
  if (covered < stop) {
    int64_t gap_end = stop;
    for (const FlatPiece &p : sorted)
      if (p.range.begin > covered) gap_end = std::min(gap_end, p.range.begin);
    return CheckpointError("the checkpoint's " + what + " pieces do not cover flat elements [" +
                           std::to_string(covered) + ", " + std::to_string(gap_end) +
                           "): a rank's shard file is missing from meta.json's \"shards\"; "
                           "the checkpoint is incomplete");
  }
  return Status::Ok();
}

Result<FlatRange> ShardFileRange(const SafetensorsFile &file, const std::string &where) {
  auto number = [&](const char *key) -> Result<int64_t> {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end())
      return CheckpointError(where + " has no \"" + std::string(key) +
                             "\" in its metadata: not a dstrain shard file");
    try {
      size_t used = 0;
      const long long v = std::stoll(it->second, &used);
      if (used != it->second.size() || v < 0) throw std::invalid_argument(it->second);
      return int64_t(v);
    } catch (const std::exception &) {
      return CheckpointError(where + ": metadata \"" + std::string(key) + "\" = \"" + it->second +
                             "\" is not a non-negative integer");
    }
  };
  Result<int64_t> begin = number("begin");
  if (!begin.ok()) return begin.status();
  Result<int64_t> end = number("end");
  if (!end.ok()) return end.status();
  if (end.value() < begin.value())
    return CheckpointError(where + ": metadata range [" + std::to_string(begin.value()) + ", " +
                           std::to_string(end.value()) + ") is empty or reversed");
  for (const auto &[name, t] : file.tensors) {
    if (t.dtype != TensorDType::kF32 || t.numel() != end.value() - begin.value())
      return CheckpointError(where + ": tensor \"" + name + "\" holds " +
                             std::to_string(t.numel()) + " elements but the file's range has " +
                             std::to_string(end.value() - begin.value()));
  }
  return FlatRange{begin.value(), end.value()};
}

}  // namespace dst
