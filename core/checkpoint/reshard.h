// Resharding on load. A checkpoint holds the model's flat state (every tensor
// in declaration order, concatenated, without padding) in two forms:
// consolidated per-tensor weights (model.safetensors) and flat pieces
// [begin, end) of each optimizer state written by the rank that owned them
// (zero_rank_<r>.safetensors). A rank of any new layout — another dp, tp or
// pp size, another ZeRO stage — fills the flat range it holds from whatever pieces
// overlap it; the old layout matters only through those ranges.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint/safetensors.h"
#include "core/common/status.h"

namespace dst {

struct FlatRange {
  int64_t begin = 0, end = 0;  // [begin, end) in flat elements
  int64_t size() const { return end - begin; }
};

// Where a named tensor sits in the flat state. A tensor-parallel slice is a
// strided part of its whole tensor: runs of `run` elements, run k starting at
// element run_starts[k] of the whole tensor (empty: the whole tensor, one run;
// -1: a padding row, in no tensor of the checkpoint).
struct FlatTensor {
  FlatTensor(std::string n, int64_t at, int64_t count)
      : name(std::move(n)), offset(at), numel(count) {}
  std::string name;
  int64_t offset = 0, numel = 0;
  int64_t run = 0;
  std::vector<int64_t> run_starts;
};

// A piece of one flat state found in a checkpoint file.
struct FlatPiece {
  FlatRange range;
  const float *data = nullptr;  // [range.size()]
  std::string file;             // for messages
};

// The shard file rank `rank` writes: "zero_rank_<rank>.safetensors".
std::string ShardFileName(int64_t rank);

// out[0, want.size()) = flat elements `want` of the consolidated tensors in
// `file`; elements at or beyond `total` (padding) are zero. The tensors must
// already have been matched against the model (names, shapes, F32).
void CopyFlatFromTensors(const SafetensorsFile &file, const std::vector<FlatTensor> &tensors,
                         FlatRange want, float *out);

// out[0, want.size()) = flat elements `want` assembled from `pieces`; elements
// at or beyond `total` are zero. Pieces may come in any order and overlap
// (e.g. replicated stage-0 state); a gap in [want.begin, min(want.end, total))
// is a kCheckpoint error naming `what` and the missing elements.
Status AssembleFlat(const std::vector<FlatPiece> &pieces, FlatRange want, int64_t total,
                    const std::string &what, float *out);

// Reads the flat range a shard file's metadata declares ("begin", "end").
Result<FlatRange> ShardFileRange(const SafetensorsFile &file, const std::string &where);

// How one rank's flat buffer maps onto the checkpoint's flat state (the
// whole model's tensors in declaration order). The identity for a whole
// model; a pipeline stage holds a subset of the tensors, and a
// tensor-parallel rank slices of them, so one of its ranges is several pieces
// of the whole.
class FlatMap {
 public:
  struct Segment {
    FlatRange local, whole;  // the same elements in both spaces
  };
  // `local`: this rank's tensors (their offsets in its buffer, and their
  // runs when they are slices); `whole`: the whole model's. Tensors match by
  // name.
  FlatMap(const std::vector<FlatTensor> &local, const std::vector<FlatTensor> &whole);
  // The segments of local range `range` (clipped to tensors; padding has
  // none), in local order, neighbours that are contiguous in both spaces
  // merged. `skip`: local tensors left out (a pipeline's second copy of a
  // tied weight; on tensor-parallel ranks other than the first, the tensors
  // every tp rank holds whole).
  std::vector<Segment> Cut(FlatRange range, const std::vector<std::string> &skip = {}) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<Segment> runs;  // local order, contiguous in both spaces
  };
  std::vector<Tensor> tensors_;  // local order
};

// "[[b0,e0],[b1,e1]]" and back: the pieces of a shard file that holds
// several ranges of the flat state (a pipeline stage's).
std::string PiecesText(const std::vector<FlatRange> &pieces);
Result<std::vector<FlatRange>> ParsePieces(const std::string &text, const std::string &where);

}  // namespace dst
