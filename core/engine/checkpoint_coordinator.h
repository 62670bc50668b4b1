// CheckpointCoordinator: saves and loads one rank's share of a checkpoint
// (DIR/TAG with model.safetensors, zero_rank_<r>.safetensors, meta.json, and
// DIR/latest) and agrees with the other ranks through the rendezvous store.
// It sees the training state only through a narrow view: the weights and
// optimizer state it reads and restores (DataParallelism), the counters, the
// loss scaler, and the facts a checkpoint records.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/reshard.h"
#include "core/comm/launch_env.h"
#include "core/comm/store.h"
#include "core/common/status.h"
#include "core/config/config.h"
#include "core/engine/executor.h"
#include "core/model/model_spec.h"
#include "core/layers/params.h"
#include "core/precision/loss_scaler.h"
#include "core/zero/parallelism.h"

namespace dst {

// What a checkpoint reads and writes of one rank's training state.
struct TrainingStateView {
  const Config *config = nullptr;
  LaunchEnv env;
  const ModelSpec *spec = nullptr;
  const std::vector<ParamDecl> *decls = nullptr;        // this rank's tensors
  const std::vector<ParamDecl> *whole_decls = nullptr;  // the whole model's (= decls without pp)
  int64_t num_parameters = 0;                           // the whole model's
  int64_t local_parameters = 0;                         // this rank's (its stage's)
  // Tensors this rank holds that another rank saves: a second copy (a
  // pipeline's last stage and the tied wte), and on tp ranks other than the
  // first the tensors every tp rank holds whole. Loaded like the saved copy.
  std::vector<std::string> not_saved;
  int64_t dp_rank = 0, pp_size = 1;
  DataParallelism *dp = nullptr;         // weights and optimizer state
  TrainingProgress *progress = nullptr;  // steps taken and skipped
  LossScaler *scaler = nullptr;          // fp16 loss scale
  Store *store = nullptr;                // null on a single-rank job
  std::chrono::milliseconds comm_timeout{300000};
  std::function<double()> next_lr;  // the LR the next step will use (recorded)
};

class CheckpointCoordinator {
 public:
  explicit CheckpointCoordinator(TrainingStateView view);

  // Every rank calls them with the same arguments (collective through the store).
  Status Save(const std::string &dir, const std::string &tag, const std::string &client_state_json);
  Status Load(const std::string &dir, const std::string &tag, std::string *client_state_json);
  // Only the weights of DIR/TAG's model.safetensors (names and shapes must
  // match; its checksums are verified), with no optimizer state, step or
  // model-spec check: what a user asks for to start a model that computes
  // differently (another n_head, say) from a checkpoint's weights.
  Status LoadWeights(const std::string &dir, const std::string &tag);
  // The weights of a Hugging Face model directory (hf_import.cc): each rank
  // reads only the tensors it holds, converts them from the file's dtype
  // (F32, F16, BF16) and layout, and writes its share. Checked on every rank
  // (missing, unexpected and misshapen tensors named) before any rank
  // changes anything.
  Status LoadHfWeights(const std::string &dir);

 private:
  // Whether this rank holds every whole weight (no pipeline, no tensor
  // parallelism, not ZeRO-3 across ranks): then rank 0 writes model.safetensors.
  bool HoldsEveryWeight() const;
  struct PreparedLoad;
  std::string CheckpointKeyPrefix(const char *phase) const;
  // `mine` (this rank's validation) posted to the store and every rank's
  // read back: the first failure, on every rank, with `context` (a single
  // rank: `mine`). `phase` keys the reports.
  Status AgreeOnValidation(const Status &mine, const char *phase, const std::string &what,
                           const std::string &context);
  nlohmann::json CheckpointMeta(const nlohmann::json &client) const;
  Status WriteOwnCheckpointFiles(const std::string &dir, const std::string &tag,
                                 std::vector<WrittenFile> *written, nlohmann::json *shards);
  // This rank's own state (DataParallelism::OwnStateBuffers), when it has
  // any: own_state_rank_<r>.safetensors, and its entry for meta.json's
  // "own_states".
  Status WriteOwnStateFile(const std::string &dir, const std::string &tag,
                           std::vector<WrittenFile> *written, nlohmann::json *own_states);
  // What must be equal for a rank's own state to mean the same after a load:
  // the topology, the precision, the optimizer type and gradient_compression.
  nlohmann::json OwnStateLayout() const;
  // Reads this rank's own state when the checkpoint was saved in this layout
  // (else the load starts it afresh, and `own_note` says why).
  Status PrepareOwnState(LoadedCheckpoint *ckpt, PreparedLoad *out) const;
  Result<WrittenFile> ConsolidateWeights(const std::string &dir, const std::string &tag,
                                         const nlohmann::json &shards);
  // Unless HoldsEveryWeight: ConsolidateWeights into `files` (aborting the staging on failure).
  Status AddConsolidatedWeights(const std::string &dir, const std::string &tag,
                                const nlohmann::json &shards, std::vector<WrittenFile> *files);
  Status CollectAndCommit(const std::string &dir, const std::string &tag, nlohmann::json meta,
                          const std::string &what);
  Status PrepareLoad(const std::string &dir, const std::string &tag, PreparedLoad *out);
  Status ReadPerTensorScalars(const nlohmann::json &meta, const std::string &where,
                              PreparedLoad *out) const;

  TrainingStateView view_;
  FlatMap map_;      // this rank's flat buffer -> the checkpoint's flat state
  int64_t ops_ = 0;  // saves + loads so far: names their store keys
};

}  // namespace dst
