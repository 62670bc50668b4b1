#include "autotuner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "cli_error.h"

namespace dstrain_cli {

namespace {

using Json = nlohmann::json;

constexpr double kNotMeasured = -std::numeric_limits<double>::infinity();

template <typename T>
void ReadKey(const Json &section, const char *key, T *out) {
  const auto it = section.find(key);
  if (it == section.end() || it->is_null()) return;
  try {
    *out = it->get<T>();
  } catch (const Json::exception &) {
    throw CliError(kExitUsage, std::string("autotuning.") + key + ": unexpected value " +
                                   it->dump() + " (the config reference lists what it takes)");
  }
}

// An integer config key, or `fallback` when absent, null or "auto".
int64_t IntOr(const Json &config, const char *key, int64_t fallback) {
  const auto it = config.find(key);
  return it != config.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

// The ZeRO stages to tune: the configured one, or all four when the config
// leaves it open (absent, "all", or a list of stages).
std::vector<int> Stages(const Json &config) {
  const auto zero = config.find("zero_optimization");
  if (zero == config.end() || !zero->is_object() || !zero->contains("stage")) return {0, 1, 2, 3};
  const Json &stage = (*zero)["stage"];
  if (stage.is_number_integer()) return {stage.get<int>()};
  if (stage.is_array()) {
    std::vector<int> stages;
    for (const Json &s : stage)
      if (s.is_number_integer()) stages.push_back(s.get<int>());
    if (!stages.empty()) return stages;
  }
  return {0, 1, 2, 3};
}

// (tp, pp) pairs whose product divides the world size, (0, 0) standing for
// "as configured".
std::vector<std::pair<int64_t, int64_t>> Layouts(bool fast, int64_t world) {
  if (fast) return {{0, 0}};
  std::vector<std::pair<int64_t, int64_t>> layouts;
  for (int64_t tp = 1; tp <= world; ++tp)
    for (int64_t pp = 1; tp * pp <= world; ++pp)
      if (world % (tp * pp) == 0) layouts.push_back({tp, pp});
  return layouts;
}

// The micro-batches allowed by the bounds and the batch keys, ascending, each
// with its accumulation steps.
std::vector<std::pair<int64_t, int64_t>> MicroBatches(const Json &base, const TuningSettings &s,
                                                      int64_t dp) {
  const int64_t fixed_batch = IntOr(base, "train_batch_size", 0);
  const int64_t accumulation = IntOr(base, "gradient_accumulation_steps", 1);
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t mbs = s.min_micro_batch; mbs <= s.max_micro_batch; ++mbs) {
    int64_t gas = accumulation;
    if (fixed_batch > 0) {
      if (fixed_batch % (mbs * dp) != 0) continue;
      gas = fixed_batch / (mbs * dp);
    }
    const int64_t batch = mbs * gas * dp;
    if (batch < s.min_train_batch_size) continue;
    if (s.max_train_batch_size && batch > *s.max_train_batch_size) break;
    out.push_back({mbs, gas});
  }
  return out;
}

// Up to `count` entries of [0, n) spread evenly from the first to `last`.
std::vector<size_t> Spread(size_t last, int64_t count) {
  std::vector<size_t> picks;
  if (count <= 1 || last == 0) return {last};
  for (int64_t i = 0; i < count; ++i) {
    const size_t at = size_t(std::llround(double(last) * double(i) / double(count - 1)));
    if (picks.empty() || picks.back() != at) picks.push_back(at);
  }
  return picks;
}

std::string Mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return text;
}

// Model-based tuner's features of a point (the knobs' in key order: a
// phase's points all set the same ones).
std::vector<double> Features(const TrialPoint &p) {
  std::vector<double> f = {1.0,
                           std::log2(double(p.micro_batch)),
                           p.stage == 1 ? 1.0 : 0.0,
                           p.stage == 2 ? 1.0 : 0.0,
                           p.stage == 3 ? 1.0 : 0.0,
                           std::log2(double(std::max<int64_t>(1, p.tp))),
                           std::log2(double(std::max<int64_t>(1, p.pp))),
                           p.recompute ? 1.0 : 0.0};
  for (const auto &[key, value] : p.knobs.items())
    f.push_back(value.is_boolean() ? (value.get<bool>() ? 1.0 : 0.0)
                                   : std::log2(std::max(1.0, value.get<double>())));
  return f;
}

// The ZeRO knobs that change what dstrain does, each with the stages it acts
// at, DeepSpeed's default values to try, and whether it is a size compared
// with the gradient (all values at or over a rank's gradient elements act
// alike: one bucket) and whether it acts only across data-parallel ranks.
struct KnobRule {
  const char *key;
  const char *abbreviation;  // in trial names
  int first_stage;
  std::vector<Json> defaults;
  bool size = false, communication = false;
};
const std::vector<KnobRule> &KnobRules() {
  static const std::vector<KnobRule> rules = {
      {"overlap_comm", "oc", 0, {true, false}, false, true},
      {"reduce_bucket_size", "rbs", 0, {5e7, 5e8, 1e9}, true, true},
      {"stage3_prefetch_bucket_size", "pbs", 3, {0, 5e7, 5e8}, true, false},
      {"stage3_param_persistence_threshold", "ppt", 3, {1e4, 1e5, 1e6}},
      {"sub_group_size", "sgs", 0, {}},  // the user's lists only (offload's pieces)
  };
  return rules;
}
const KnobRule *FindRule(const std::string &key) {
  for (const KnobRule &r : KnobRules())
    if (key == r.key) return &r;
  return nullptr;
}
// DeepSpeed's tuning keys that dstrain accepts but that change nothing here
// (one contiguous gradient buffer and all-gathers are what it always does).
bool IsInertKnob(const std::string &key) {
  for (const char *k :
       {"allgather_bucket_size", "contiguous_gradients", "reduce_scatter", "allgather_partitions",
        "round_robin_gradients", "stage3_max_live_parameters", "stage3_max_reuse_distance"})
    if (key == k) return true;
  return false;
}

// 5e7 -> "5e7", 1000 -> "1000", true -> "1".
std::string Short(const Json &v) {
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  const double d = v.get<double>();
  if (d == 0) return "0";
  const int exponent = int(std::floor(std::log10(std::fabs(d))));
  const double mantissa = d / std::pow(10.0, exponent);
  if (exponent >= 4 && std::fabs(mantissa - std::round(mantissa)) < 1e-9)
    return std::to_string(std::llround(mantissa)) + "e" + std::to_string(exponent);
  char text[32];
  std::snprintf(text, sizeof text, "%g", d);
  return text;
}

// Ridge regression: w = (X'X + lambda I)^-1 X'y by Gaussian elimination.
std::vector<double> FitRidge(const std::vector<std::vector<double>> &x,
                             const std::vector<double> &y) {
  const size_t n = x.front().size();
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
  for (size_t r = 0; r < x.size(); ++r)
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) a[i][j] += x[r][i] * x[r][j];
      a[i][n] += x[r][i] * y[r];
    }
  for (size_t i = 0; i < n; ++i) a[i][i] += 1e-3;
  for (size_t c = 0; c < n; ++c) {
    size_t pivot = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[pivot][c])) pivot = r;
    std::swap(a[c], a[pivot]);
    for (size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k <= n; ++k) a[r][k] -= f * a[c][k];
    }
  }
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = a[i][n] / a[i][i];
  return w;
}

}  // namespace

TuningSettings ReadTuningSettings(const Json &config) {
  TuningSettings s;
  const auto it = config.find("autotuning");
  if (it == config.end() || !it->is_object()) return s;
  const Json &a = *it;
  ReadKey(a, "fast", &s.fast);
  ReadKey(a, "overwrite", &s.overwrite);
  ReadKey(a, "results_dir", &s.results_dir);
  ReadKey(a, "exps_dir", &s.exps_dir);
  ReadKey(a, "metric", &s.metric);
  ReadKey(a, "start_profile_step", &s.start_profile_step);
  ReadKey(a, "end_profile_step", &s.end_profile_step);
  if (a.contains("max_train_batch_size") && !a["max_train_batch_size"].is_null()) {
    int64_t max_batch = 0;
    ReadKey(a, "max_train_batch_size", &max_batch);
    s.max_train_batch_size = max_batch;
  }
  ReadKey(a, "min_train_batch_size", &s.min_train_batch_size);
  ReadKey(a, "min_train_micro_batch_size_per_gpu", &s.min_micro_batch);
  ReadKey(a, "max_train_micro_batch_size_per_gpu", &s.max_micro_batch);
  ReadKey(a, "num_tuning_micro_batch_sizes", &s.num_tuning_micro_batch_sizes);
  ReadKey(a, "tuner_type", &s.tuner_type);
  ReadKey(a, "tuner_early_stopping", &s.tuner_early_stopping);
  ReadKey(a, "tuner_num_trials", &s.tuner_num_trials);
  std::transform(s.metric.begin(), s.metric.end(), s.metric.begin(), ::tolower);
  std::transform(s.tuner_type.begin(), s.tuner_type.end(), s.tuner_type.begin(), ::tolower);
  if (const auto m = a.find("arg_mappings"); m != a.end() && m->is_object())
    for (const auto &[key, value] : m->items()) {
      std::string trimmed = key;
      trimmed.erase(trimmed.find_last_not_of(" \t") + 1);
      trimmed.erase(0, trimmed.find_first_not_of(" \t"));
      if (value.is_string()) s.arg_mappings.push_back({trimmed, value.get<std::string>()});
    }
  return s;
}

std::string TrialPoint::Name() const {
  std::string name = "z" + std::to_string(stage) + "_mbs" + std::to_string(micro_batch) + "_gas" +
                     std::to_string(accumulation);
  if (tp > 0) name += "_tp" + std::to_string(tp) + "_pp" + std::to_string(pp);
  if (recompute) name += "_ckpt";
  for (const auto &[key, value] : knobs.items()) {
    const KnobRule *rule = FindRule(key);
    name += std::string("_") + (rule ? rule->abbreviation : key.c_str()) + Short(value);
  }
  return name;
}

double Trial::Score(const std::string &metric) const {
  if (!ran || !failure.empty()) return kNotMeasured;
  if (metric == "latency") return -latency_ms;
  if (metric == "flops") return flops;
  return throughput;
}

Json WithoutKnobLists(Json config) {
  const auto zero = config.find("zero_optimization");
  if (zero == config.end() || !zero->is_object()) return config;
  for (auto it = zero->begin(); it != zero->end();)
    if (it->is_array() && (FindRule(it.key()) || IsInertKnob(it.key())))
      it = zero->erase(it);
    else
      ++it;
  return config;
}

Json TrialConfig(const Json &base, const TrialPoint &point, int64_t dp) {
  Json c = base;
  c["train_micro_batch_size_per_gpu"] = point.micro_batch;
  c["gradient_accumulation_steps"] = point.accumulation;
  if (dp > 0)
    c["train_batch_size"] = point.micro_batch * point.accumulation * dp;
  else
    c.erase("train_batch_size");  // the layout decides dp: derived from the other two
  if (!c.contains("zero_optimization") || !c["zero_optimization"].is_object())
    c["zero_optimization"] = Json::object();
  c = WithoutKnobLists(c);
  Json &zero = c["zero_optimization"];
  zero["stage"] = point.stage;
  for (const auto &[key, value] : point.knobs.items()) zero[key] = value;
  if (point.tp > 0) {
    Json tp = Json::object();
    if (c.contains("tensor_parallel") && c["tensor_parallel"].contains("sequence_parallel"))
      tp["sequence_parallel"] = c["tensor_parallel"]["sequence_parallel"];
    tp["autotp_size"] = point.tp;
    c["tensor_parallel"] = tp;
    Json pp = c.contains("pipeline_parallel") ? c["pipeline_parallel"] : Json::object();
    pp["enabled"] = point.pp > 1;
    pp["pp_size"] = point.pp;
    c["pipeline_parallel"] = pp;
    if (point.recompute)
      c["activation_checkpointing"] = {{"recompute_granularity", "full"}};
    else
      c.erase("activation_checkpointing");
  }
  return c;
}

std::vector<Trial> BuildSpace(const Json &base, const TuningSettings &settings, int64_t world,
                              int64_t budget, const EstimateFn &estimate) {
  std::vector<Trial> space;
  const std::vector<bool> recompute =
      settings.fast ? std::vector<bool>{false} : std::vector<bool>{false, true};
  for (int stage : Stages(base))
    for (const auto &tp_pp : Layouts(settings.fast, world))
      for (bool ckpt : recompute) {
        const int64_t tp = tp_pp.first, pp = tp_pp.second;
        // dp: world / (tp x pp), the configured tp x pp when it is kept.
        TrialPoint probe{stage, settings.min_micro_batch, 1, tp, pp, ckpt};
        const Estimate layout = estimate(TrialConfig(base, probe, 0));
        if (!layout.error.empty()) {
          Trial t;
          t.point = probe;
          t.pruned = layout.error;
          space.push_back(t);
          continue;
        }
        const int64_t dp = layout.dp;
        const auto batches = MicroBatches(base, settings, dp);
        auto point_of = [&](size_t i) {
          return TrialPoint{stage, batches[i].first, batches[i].second, tp, pp, ckpt};
        };
        auto trial_of = [&](size_t i) {
          Trial t;
          t.point = point_of(i);
          t.dp = dp;
          const Estimate e = estimate(TrialConfig(base, t.point, dp));
          t.estimated_bytes = e.error.empty() ? e.bytes : -1;
          if (!e.error.empty())
            t.pruned = e.error;
          else if (e.bytes > budget)
            t.pruned = "needs " + Mib(e.bytes) + " per rank, over the budget of " + Mib(budget);
          return t;
        };
        if (batches.empty()) {
          Trial t;
          t.point = probe;
          t.dp = dp;
          t.pruned = "no micro-batch in [" + std::to_string(settings.min_micro_batch) + ", " +
                     std::to_string(settings.max_micro_batch) +
                     "] meets the batch keys (train_batch_size, max_train_batch_size)";
          space.push_back(t);
          continue;
        }
        // The largest micro-batch that fits: memory grows with it, so a
        // binary search over the allowed ones.
        Trial smallest = trial_of(0);
        if (!smallest.pruned.empty()) {
          space.push_back(smallest);
          continue;
        }
        size_t lo = 0, hi = batches.size() - 1;
        Trial over;
        while (lo < hi) {
          const size_t mid = (lo + hi + 1) / 2;
          Trial t = trial_of(mid);
          if (t.pruned.empty()) {
            lo = mid;
          } else {
            hi = mid - 1;
            over = t;
          }
        }
        for (size_t i : Spread(lo, settings.num_tuning_micro_batch_sizes))
          space.push_back(i == 0 ? smallest : trial_of(i));
        if (!over.pruned.empty()) space.push_back(over);  // where the memory ends
      }
  return space;
}

std::vector<Knob> KnobSpace(const Json &base, const TuningSettings &settings, const Trial &best,
                            int64_t gradient_elements, std::vector<std::string> *notes) {
  const Json none = Json::object();
  const auto zero_it = base.find("zero_optimization");
  const Json &zero = zero_it != base.end() && zero_it->is_object() ? *zero_it : none;
  std::vector<Knob> space;
  for (const auto &[key, value] : zero.items()) {
    if (!value.is_array() || key == "stage") continue;
    if (IsInertKnob(key)) {
      notes->push_back(key + ": accepted by dstrain but changes nothing it does; not tuned");
    } else if (FindRule(key)) {
      if (value.empty()) throw CliError(kExitUsage, "zero_optimization." + key + ": an empty list");
      space.push_back({key, std::vector<Json>(value.begin(), value.end())});
    }
  }
  if (space.empty() && !settings.fast)
    for (const KnobRule &r : KnobRules())
      if (!r.defaults.empty()) space.push_back({r.key, r.defaults});

  // Keep what acts at this point, each distinct behaviour once.
  std::vector<Knob> kept;
  for (Knob &knob : space) {
    const KnobRule &rule = *FindRule(knob.key);
    if (best.point.stage < rule.first_stage) {
      notes->push_back(knob.key + ": acts at ZeRO " + std::to_string(rule.first_stage) +
                       " only; the best point is at stage " + std::to_string(best.point.stage));
      continue;
    }
    if (rule.communication && best.dp <= 1) {
      notes->push_back(knob.key + ": acts across data-parallel ranks; the best point has one");
      continue;
    }
    std::vector<Json> values;
    bool whole_seen = false;
    for (const Json &v : knob.values) {
      if (rule.size && v.is_number() && v.get<double>() >= double(gradient_elements)) {
        if (whole_seen) {
          notes->push_back(knob.key + " " + Short(v) + ": holds a rank's " +
                           std::to_string(gradient_elements) +
                           " gradient elements at once, as a smaller value tried does; skipped");
          continue;
        }
        whole_seen = true;
      }
      if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    }
    if (values.size() > 1) kept.push_back({knob.key, values});
  }
  return kept;
}

std::vector<Trial> BuildKnobSpace(const Json &base, const Trial &best,
                                  const std::vector<Knob> &knobs, int64_t budget,
                                  const EstimateFn &estimate) {
  std::vector<Trial> space;
  if (knobs.empty()) return space;
  std::vector<size_t> at(knobs.size(), 0);  // an odometer over the values
  for (;;) {
    Trial t = best;
    t.ran = false;
    t.reused = false;
    t.failure.clear();
    t.throughput = t.latency_ms = t.flops = 0;
    for (size_t k = 0; k < knobs.size(); ++k) t.point.knobs[knobs[k].key] = knobs[k].values[at[k]];
    const Estimate e = estimate(TrialConfig(base, t.point, t.dp));
    t.estimated_bytes = e.error.empty() ? e.bytes : -1;
    if (!e.error.empty())
      t.pruned = e.error;
    else if (e.bytes > budget)
      t.pruned = "needs " + Mib(e.bytes) + " per rank, over the budget of " + Mib(budget);
    space.push_back(t);
    size_t k = knobs.size();
    while (k > 0 && ++at[k - 1] == knobs[k - 1].values.size()) at[--k] = 0;
    if (k == 0) break;
  }
  return space;
}

Tuner::Tuner(const TuningSettings &settings, std::vector<Trial> *trials, size_t first,
             std::optional<double> to_beat)
    : settings_(settings), trials_(trials), first_(first) {
  if (to_beat) {
    have_best_ = true;
    best_ = *to_beat;
  }
  for (size_t i = first; i < trials->size(); ++i)
    if ((*trials)[i].pruned.empty()) order_.push_back(int(i));
  if (settings.tuner_type != "gridsearch") {
    std::mt19937 rng(20240229);
    std::shuffle(order_.begin(), order_.end(), rng);
  }
}

int Tuner::Next() {
  if (last_ >= 0) {
    const double score = (*trials_)[size_t(last_)].Score(settings_.metric);
    if (score != kNotMeasured && (!have_best_ || score > best_)) {
      have_best_ = true;
      best_ = score;
      since_best_ = 0;
    } else {
      ++since_best_;
    }
  }
  if (run_ >= settings_.tuner_num_trials || since_best_ >= settings_.tuner_early_stopping)
    return -1;
  std::vector<int> open;
  for (int i : order_)
    if (!(*trials_)[size_t(i)].ran) open.push_back(i);
  if (open.empty()) return -1;
  const int next = settings_.tuner_type == "model_based" ? NextModelBased(open) : open.front();
  ++run_;
  last_ = next;
  return next;
}

// A cost model fitted to the measured trials picks the most promising open
// point; until two are measured the (shuffled) order decides.
int Tuner::NextModelBased(const std::vector<int> &open) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (size_t i = first_; i < trials_->size(); ++i) {
    const Trial &t = (*trials_)[i];
    const double score = t.Score(settings_.metric);
    if (score == kNotMeasured) continue;
    x.push_back(Features(t.point));
    y.push_back(settings_.metric == "latency" ? score : std::log(std::max(score, 1e-30)));
  }
  if (x.size() < 2) return open.front();
  const std::vector<double> w = FitRidge(x, y);
  int best = open.front();
  double best_prediction = -std::numeric_limits<double>::infinity();
  for (int i : open) {
    const std::vector<double> f = Features((*trials_)[size_t(i)].point);
    double prediction = 0;
    for (size_t k = 0; k < f.size(); ++k) prediction += w[k] * f[k];
    if (prediction > best_prediction) {
      best_prediction = prediction;
      best = i;
    }
  }
  return best;
}

int BestTrial(const std::vector<Trial> &trials, const std::string &metric) {
  int best = -1;
  for (size_t i = 0; i < trials.size(); ++i) {
    const double score = trials[i].Score(metric);
    if (score == kNotMeasured) continue;
    if (best < 0 || score > trials[size_t(best)].Score(metric)) best = int(i);
  }
  return best;
}

std::string ResultsTable(const std::vector<Trial> &trials, const std::string &metric) {
  const int best = BestTrial(trials, metric);
  std::string out;
  char line[1024];
  int width = 28;
  for (const Trial &t : trials) width = std::max(width, int(t.point.Name().size()));
  std::snprintf(line, sizeof line, "%-*s %5s %5s %4s %3s %3s %3s %4s %13s %14s %11s %14s  %s\n",
                width, "trial", "stage", "mbs", "gas", "dp", "tp", "pp", "ckpt", "est. memory",
                "samples/s", "ms/step", "FLOP/s/rank", "");
  out += line;
  for (size_t i = 0; i < trials.size(); ++i) {
    const Trial &t = trials[i];
    const TrialPoint &p = t.point;
    std::string status;
    if (!t.pruned.empty())
      status = "pruned: " + t.pruned;
    else if (!t.ran)
      status = "not run (the tuner stopped first)";
    else if (!t.failure.empty())
      status = "failed: " + t.failure;
    else
      status = std::string(int(i) == best ? "<- best" : "") + (t.reused ? " (earlier result)" : "");
    const bool measured = t.ran && t.failure.empty();
    char throughput[32] = "-", latency[32] = "-", flops[32] = "-";
    if (measured) {
      std::snprintf(throughput, sizeof throughput, "%.2f", t.throughput);
      std::snprintf(latency, sizeof latency, "%.2f", t.latency_ms);
      std::snprintf(flops, sizeof flops, "%.3g", t.flops);
    }
    std::snprintf(line, sizeof line,
                  "%-*s %5d %5lld %4lld %3lld %3s %3s %4s %13s %14s %11s %14s  %s\n", width,
                  p.Name().c_str(), p.stage, static_cast<long long>(p.micro_batch),
                  static_cast<long long>(p.accumulation), static_cast<long long>(t.dp),
                  p.tp > 0 ? std::to_string(p.tp).c_str() : "cfg",
                  p.tp > 0 ? std::to_string(p.pp).c_str() : "cfg", p.recompute ? "yes" : "no",
                  t.estimated_bytes >= 0 ? Mib(t.estimated_bytes).c_str() : "-", throughput,
                  latency, flops, status.c_str());
    out += line;
  }
  return out;
}

Json ResultsJson(const std::vector<Trial> &trials, const std::string &metric) {
  Json all = Json::array();
  for (const Trial &t : trials) {
    Json j = {{"name", t.point.Name()},
              {"zero_stage", t.point.stage},
              {"train_micro_batch_size_per_gpu", t.point.micro_batch},
              {"gradient_accumulation_steps", t.point.accumulation},
              {"dp", t.dp},
              {"recompute", t.point.recompute},
              {"estimated_bytes_per_rank", t.estimated_bytes},
              {"ran", t.ran}};
    if (!t.point.knobs.empty()) j["zero_optimization"] = t.point.knobs;
    if (t.point.tp > 0) {
      j["tp"] = t.point.tp;
      j["pp"] = t.point.pp;
    }
    if (!t.pruned.empty()) j["pruned"] = t.pruned;
    if (!t.failure.empty()) j["failure"] = t.failure;
    if (t.ran && t.failure.empty()) {
      j["throughput"] = t.throughput;
      j["latency"] = t.latency_ms;
      j["FLOPS_per_gpu"] = t.flops;
    }
    all.push_back(j);
  }
  const int best = BestTrial(trials, metric);
  return {{"metric", metric},
          {"best", best >= 0 ? Json(trials[size_t(best)].point.Name()) : Json(nullptr)},
          {"trials", all}};
}

}  // namespace dstrain_cli
