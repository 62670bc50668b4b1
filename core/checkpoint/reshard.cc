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
  // A pipeline stage's shard holds several pieces of [begin, end), its
  // tensors their concatenation.
  int64_t count = end.value() - begin.value();
  auto pieces_text = file.metadata.find("pieces");
  if (pieces_text != file.metadata.end()) {
    Result<std::vector<FlatRange>> pieces = ParsePieces(pieces_text->second, where);
    if (!pieces.ok()) return pieces.status();
    count = 0;
    int64_t previous_end = begin.value();
    for (const FlatRange &r : pieces.value()) {
      if (r.begin < previous_end || r.end > end.value())
        return CheckpointError(where + ": its pieces are not ordered ranges inside [" +
                               std::to_string(begin.value()) + ", " + std::to_string(end.value()) +
                               ")");
      previous_end = r.end;
      count += r.size();
    }
  }
  for (const auto &[name, t] : file.tensors) {
    if (t.dtype != TensorDType::kF32 || t.numel() != count)
      return CheckpointError(where + ": tensor \"" + name + "\" holds " +
                             std::to_string(t.numel()) + " elements but the file's range has " +
                             std::to_string(count));
  }
  return FlatRange{begin.value(), end.value()};
}

FlatMap::FlatMap(const std::vector<FlatTensor> &local, const std::vector<FlatTensor> &whole) {
  for (const FlatTensor &t : local) {
    for (const FlatTensor &w : whole) {
      if (w.name != t.name) continue;
      Tensor tensor{t.name, {}};
      if (t.run_starts.empty()) {
        tensor.runs.push_back({{t.offset, t.offset + t.numel}, {w.offset, w.offset + w.numel}});
      } else {
        int64_t at = t.offset;
        for (const int64_t start : t.run_starts) {
          if (start >= 0)  // (a padding row's run maps nowhere)
            tensor.runs.push_back({{at, at + t.run}, {w.offset + start, w.offset + start + t.run}});
          at += t.run;
        }
      }
      tensors_.push_back(std::move(tensor));
      break;
    }
  }
}

std::vector<FlatMap::Segment> FlatMap::Cut(FlatRange range,
                                           const std::vector<std::string> &skip) const {
  std::vector<Segment> out;
  for (const Tensor &t : tensors_) {
    if (std::find(skip.begin(), skip.end(), t.name) != skip.end()) continue;
    if (t.runs.empty() || t.runs.back().local.end <= range.begin ||
        t.runs.front().local.begin >= range.end)
      continue;
    // The first run that ends after range.begin (runs are in local order).
    auto run = std::upper_bound(t.runs.begin(), t.runs.end(), range.begin,
                                [](int64_t at, const Segment &s) { return at < s.local.end; });
    for (; run != t.runs.end() && run->local.begin < range.end; ++run) {
      const int64_t lo = std::max(range.begin, run->local.begin);
      const int64_t hi = std::min(range.end, run->local.end);
      const int64_t shift = run->whole.begin - run->local.begin;
      Segment seg{{lo, hi}, {lo + shift, hi + shift}};
      if (!out.empty() && out.back().local.end == seg.local.begin &&
          out.back().whole.end == seg.whole.begin) {
        out.back().local.end = seg.local.end;
        out.back().whole.end = seg.whole.end;
      } else {
        out.push_back(seg);
      }
    }
  }
  return out;
}

std::string PiecesText(const std::vector<FlatRange> &pieces) {
  std::string text = "[";
  for (size_t i = 0; i < pieces.size(); ++i)
    text += (i ? ",[" : "[") + std::to_string(pieces[i].begin) + "," +
            std::to_string(pieces[i].end) + "]";
  return text + "]";
}

Result<std::vector<FlatRange>> ParsePieces(const std::string &text, const std::string &where) {
  std::vector<FlatRange> out;
  size_t i = 0;
  auto fail = [&]() -> Status {
    return CheckpointError(where + ": metadata \"pieces\" = \"" + text.substr(0, 200) +
                           "\" is not a list of [begin, end] ranges");
  };
  auto number = [&](int64_t *v) {
    size_t used = 0;
    try {
      const long long x = std::stoll(text.substr(i), &used);
      if (x < 0 || used == 0) return false;
      *v = x;
    } catch (const std::exception &) {
      return false;
    }
    i += used;
    return true;
  };
  auto expect = [&](char c) {
    if (i < text.size() && text[i] == c) {
      ++i;
      return true;
    }
    return false;
  };
  if (!expect('[')) return fail();
  if (expect(']')) return out;
  do {
    FlatRange r;
    if (!expect('[') || !number(&r.begin) || !expect(',') || !number(&r.end) || !expect(']') ||
        r.end < r.begin)
      return fail();
    out.push_back(r);
  } while (expect(','));
  if (!expect(']') || i != text.size()) return fail();
  return out;
}

}  // namespace dst
