// The search of `dstrain autotune`: DeepSpeed's autotuning keys, the space of
// trial configurations (ZeRO stage x micro-batch, and with "fast": false the
// dp x tp x pp layouts and activation recomputation; then the best point's
// ZeRO knobs: bucket sizes, overlap, stage 3's prefetch and persistence), pruning by
// `dstrain estimate`'s exact memory, the order the tuners run trials in
// (gridsearch, random, model_based), and the results table. Running a trial
// is the command's business (autotune_command.cc); this file only decides.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dstrain_cli {

// DeepSpeed's autotuning section with its defaults.
struct TuningSettings {
  bool fast = true;
  bool overwrite = true;
  std::string results_dir = "autotuning_results";
  std::string exps_dir = "autotuning_exps";
  std::string metric = "throughput";  // "throughput", "latency" or "flops"
  int64_t start_profile_step = 3, end_profile_step = 5;
  std::optional<int64_t> max_train_batch_size;
  int64_t min_train_batch_size = 1;
  int64_t min_micro_batch = 1, max_micro_batch = 1024;
  int64_t num_tuning_micro_batch_sizes = 3;
  std::string tuner_type = "gridsearch";  // "gridsearch", "random" or "model_based"
  int64_t tuner_early_stopping = 5, tuner_num_trials = 50;
  // config key (trimmed) -> the program's argument carrying its value
  std::vector<std::pair<std::string, std::string>> arg_mappings;
};
// Reads the autotuning section of `config` (absent: the defaults).
TuningSettings ReadTuningSettings(const nlohmann::json &config);

// One point of the space.
struct TrialPoint {
  int stage = 0;
  int64_t micro_batch = 1, accumulation = 1;
  int64_t tp = 1, pp = 1;
  bool recompute = false;
  // zero_optimization keys the trial sets (the knob phase), e.g.
  // {"overlap_comm": false, "reduce_bucket_size": 5e7}; empty: the defaults.
  nlohmann::json knobs = nlohmann::json::object();
  // "z2_mbs4_gas1" (+ "_tp2_pp1", "_ckpt", "_oc0_rbs5e7")
  std::string Name() const;
};

// A point with what became of it.
struct Trial {
  TrialPoint point;
  int64_t dp = 1;
  int64_t estimated_bytes = -1;  // per-rank peak by `dstrain estimate`; -1 unknown
  std::string pruned;            // why it was not run ("" = a candidate)
  bool ran = false;
  std::string failure;  // why the run gave no metric ("" = measured)
  double throughput = 0, latency_ms = 0, flops = 0;
  bool reused = false;                            // overwrite false: an earlier result was read
  double Score(const std::string &metric) const;  // larger is better
};

// What `dstrain estimate` says of one trial configuration: the per-rank peak
// bytes and the data-parallel size, or an error text (an impossible layout,
// a refused combination).
struct Estimate {
  int64_t bytes = 0;
  int64_t dp = 1;
  int64_t parameters_per_rank = 0;  // the gradient elements a rank reduces
  std::string error;
};
using EstimateFn = std::function<Estimate(const nlohmann::json &config)>;

// `config` with its tuning lists in zero_optimization removed (a list is a
// space to tune: the dstrain default stands for it until a trial sets it).
nlohmann::json WithoutKnobLists(nlohmann::json config);

// The trial's ds_config: the user's with the point's keys set (dp 0: without
// train_batch_size, which the layout then derives).
nlohmann::json TrialConfig(const nlohmann::json &base, const TrialPoint &point, int64_t dp);

// The space for `world` ranks, pruned: every point is estimated; those over
// `budget` bytes per rank, refused, or outside the batch bounds carry why.
std::vector<Trial> BuildSpace(const nlohmann::json &base, const TuningSettings &settings,
                              int64_t world, int64_t budget, const EstimateFn &estimate);

// One ZeRO knob of the second phase and the values it takes.
struct Knob {
  std::string key;  // in zero_optimization
  std::vector<nlohmann::json> values;
};

// The knobs to tune at the best point of the first phase: the
// zero_optimization keys the config gives as lists (DeepSpeed's user-defined
// tuning space), else with "fast": false DeepSpeed's default space for the
// stage, restricted to the knobs that change what dstrain does; values that
// act alike for this model are tried once. Empty: no second phase. `notes`
// says what was dropped and why.
std::vector<Knob> KnobSpace(const nlohmann::json &base, const TuningSettings &settings,
                            const Trial &best, int64_t gradient_elements,
                            std::vector<std::string> *notes);

// Every combination of `knobs` at the point of `best`, estimated and pruned as
// BuildSpace's points are.
std::vector<Trial> BuildKnobSpace(const nlohmann::json &base, const Trial &best,
                                  const std::vector<Knob> &knobs, int64_t budget,
                                  const EstimateFn &estimate);

// Chooses the next candidate to run (an index into `trials`), or -1 when the
// tuner is done (no candidate left, tuner_num_trials run, or
// tuner_early_stopping trials without a better one).
class Tuner {
 public:
  // Tunes trials[first..]; `to_beat` is the best score before them (the
  // first phase's), which early stopping counts from.
  Tuner(const TuningSettings &settings, std::vector<Trial> *trials, size_t first = 0,
        std::optional<double> to_beat = std::nullopt);
  int Next();

 private:
  int NextModelBased(const std::vector<int> &open);
  const TuningSettings &settings_;
  std::vector<Trial> *trials_;
  size_t first_ = 0;
  std::vector<int> order_;  // gridsearch / random
  int64_t run_ = 0, since_best_ = 0;
  bool have_best_ = false;
  double best_ = 0;
  int last_ = -1;
};

// The index of the best measured trial, or -1.
int BestTrial(const std::vector<Trial> &trials, const std::string &metric);

// The table of every point, pruned and failed ones included.
std::string ResultsTable(const std::vector<Trial> &trials, const std::string &metric);
nlohmann::json ResultsJson(const std::vector<Trial> &trials, const std::string &metric);

}  // namespace dstrain_cli
