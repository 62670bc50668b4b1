#include "train_command.h"

#include "batch_source.h"

#include <charconv>
#include <cstdio>
#include <system_error>

#include "cli_error.h"
#include "engine_setup.h"
#include "format.h"
#include "handles.h"
#include "interrupt.h"
#include "progress.h"
#include "resume.h"
#include "save_dir.h"
#include "train_summary.h"
#include "trainer.h"
#include "training_loop.h"

namespace dstrain_cli {
namespace {

// An integer option that must be at least `minimum`: "--steps: must be at least 1, got 0".
CLI::Validator AtLeast(int64_t minimum) {
  return CLI::Validator(
      [minimum](std::string &text) -> std::string {
        int64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc() || end != text.data() + text.size()) {
          return "expected an integer, got '" + text + "'";
        }
        if (value < minimum) {
          return "must be at least " + std::to_string(minimum) + ", got " + text;
        }
        return "";
      },
      "");
}

// Every rank serves its own metrics; each says where (stderr, even with
// --quiet: the address is what a user or a scraper needs to find it).
void PrintMonitorUrl(const dst_engine_t *engine, const dst_engine_info_t &info) {
  const char *url = nullptr;
  Check(dst_engine_monitor_url(engine, &url), "reading the metrics address");
  if (url == nullptr || *url == '\0') return;
  std::fprintf(stderr, "dstrain: rank %lld metrics: %s (dashboard), %smetrics (Prometheus)\n",
               static_cast<long long>(info.rank), url, url);
  std::fflush(stderr);
}

void PrintPlan(const dst_engine_info_t &info, const BatchSource &batches, const LoopPlan &plan,
               const TrainOptions &options) {
  std::printf("dstrain: %s with %s parameters on %s\n",
              info.model_type == DST_MODEL_GPT ? "GPT" : "sequential model",
              FormatCount(static_cast<double>(info.num_parameters)).c_str(),
              batches.Describe().c_str());
  std::string layout =
      std::to_string(info.world_size) + " rank" + (info.world_size == 1 ? "" : "s");
  if (info.pp_size > 1)
    layout += ": " + std::to_string(info.pp_size) + " pipeline stages x " +
              std::to_string(info.dp_size) + " data-parallel";
  std::printf(
      "dstrain: steps %lld -> %lld, %zu %s per step (%s), eval every %lld steps on %lld "
      "batches\n",
      static_cast<long long>(plan.start_step), static_cast<long long>(plan.total_steps),
      batches.units_per_batch() * size_t(info.dp_size), batches.unit(), layout.c_str(),
      static_cast<long long>(plan.eval_interval), static_cast<long long>(options.eval_batches));
  std::fflush(stdout);
}

LoopPlan MakeLoopPlan(const TrainOptions &options, int64_t start_step, uint64_t data_seed) {
  LoopPlan plan;
  plan.start_step = start_step;
  plan.total_steps = options.steps;
  plan.eval_interval = options.eval_interval;
  plan.save_dir = options.save_dir;
  plan.save_interval = options.save_interval;
  plan.data_seed = data_seed;
  plan.memory_status_interval = options.memory_status_interval;
  return plan;
}

}  // namespace

TrainCommand::TrainCommand(CLI::App &parent)
    : app_(parent.add_subcommand(
          "train",
          "Train a model (built-in byte-level GPT by default, or a sequential model on "
          "--data synthetic)")) {
  TrainOptions &o = options_;
  const CLI::Validator existing_file = CLI::ExistingFile.description("");
  app_->add_option("--config", o.config_path, "ds_config.json (default: built-in)")
      ->type_name("FILE")
      ->check(existing_file);
  app_->add_option("--model", o.model_path,
                   "model spec JSON, or a Hugging Face model directory (config.json and "
                   "safetensors weights: the run starts from them) (default: built-in small GPT)")
      ->type_name("FILE|DIR")
      ->check(CLI::ExistingPath.description(""));
  app_->add_option("--data", o.data_path,
                   "GPT: text file to train on (default: the fortunes corpus); sequential model: "
                   "synthetic (inputs ~ N(0, 1), labels from a fixed random teacher), "
                   "INPUTS.npy with --labels, or DATA.safetensors with tensors \"inputs\" "
                   "and \"labels\"")
      ->type_name("FILE");
  app_->add_option("--labels", o.labels_path,
                   "sequential model: LABELS.npy beside --data INPUTS.npy (float32 [samples, "
                   "outputs] for MSE, int class ids [samples] for cross-entropy)")
      ->type_name("FILE");
  app_->add_option("--val-fraction", o.val_fraction,
                   "last fraction of the text (or of the array rows) held out")
      ->type_name("F")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0).description(""));
  app_->add_option("--steps", o.steps, "total optimizer steps, counting loaded ones")
      ->type_name("N")
      ->capture_default_str()
      ->check(AtLeast(1));
  app_->add_option("--seq-len", o.seq_len, "tokens per sample (default: the model's n_ctx)")
      ->type_name("T")
      ->check(AtLeast(1));
  app_->add_option("--memory-status", o.memory_status_interval,
                   "print rank 0's memory (per category, RSS, the machine's) at the start and "
                   "every N steps")
      ->type_name("N")
      ->check(AtLeast(1));
  app_->add_option("--eval-interval", o.eval_interval, "evaluate every N steps and at the end")
      ->type_name("N")
      ->capture_default_str()
      ->check(AtLeast(1));
  app_->add_option("--eval-batches", o.eval_batches, "validation batches per evaluation")
      ->type_name("N")
      ->capture_default_str()
      ->check(AtLeast(1));
  app_->add_option("--metrics-port", metrics_port_,
                   "serve Prometheus metrics and the live dashboard on PORT + local rank "
                   "(0: any free port; same as dstrain.monitor.http in the config)")
      ->type_name("PORT")
      ->check(CLI::Range(0, 65535).description(""));
  CLI::Option *save =
      app_->add_option("--save", o.save_dir, "save a checkpoint here at the end")->type_name("DIR");
  app_->add_option("--save-interval", o.save_interval, "also save every N steps")
      ->type_name("N")
      ->check(AtLeast(0))
      ->needs(save);
  CLI::Option *load =
      app_->add_option("--load", o.load_dir, "resume from the checkpoint in DIR")->type_name("DIR");
  app_->add_option("--tag", o.load_tag, "checkpoint tag to load (default: DIR/latest)")
      ->type_name("T")
      ->needs(load);
  app_->add_option("--seed", seed_,
                   "data seed (default: the checkpoint's, else the config's dstrain.seed)")
      ->type_name("S");
  app_->add_flag("--quiet,-q", o.quiet, "print only the final summary");
}

int TrainCommand::Run() {
  TrainOptions options = options_;
  if (app_->count("--seed") > 0) options.seed = seed_;
  if (app_->count("--metrics-port") > 0) options.metrics_port = metrics_port_;
  InstallInterruptHandler();

  Engine engine =
      CreateEngine(options.config_path, options.model_path, options.steps, options.metrics_port);
  const dst_engine_info_t info = ReadEngineInfo(engine.get());
  const BatchShape shape = ChooseBatchShape(info, options.seq_len);
  const ResolvedConfig config = ReadResolvedConfig(engine.get());
  if (!options.save_dir.empty()) CheckSaveDir(options.save_dir, engine.get(), info.rank);
  PrintMonitorUrl(engine.get(), info);

  const ResumePoint resume = options.load_dir.empty()
                                 ? StartingPoint(engine.get())
                                 : LoadCheckpoint(engine.get(), options.load_dir, options.load_tag);
  if (resume.step >= options.steps) {
    const std::string from = options.load_dir.empty() ? "the NVMe swap files (dstrain.resume_from_swap) are"
                                                      : "the checkpoint is";
    Warn(from + " already at step " + std::to_string(resume.step) + ", --steps is " +
         std::to_string(options.steps) + ": nothing to train (raise --steps to continue)");
  }
  const uint64_t data_seed = ChooseDataSeed(options.seed, config.data_seed, resume);
  const std::unique_ptr<BatchSource> batches =
      OpenBatchSource(info, options.model_path, options.data_path, options.labels_path,
                      options.val_fraction, shape, data_seed);

  LoopPlan plan = MakeLoopPlan(options, resume.step, data_seed);
  if (info.rank != 0) plan.memory_status_interval = 0;  // rank 0 talks

  // In a multi-rank job every rank trains and evaluates (the losses are
  // global), but only rank 0 talks; errors still come from every rank.
  const bool speaker = info.rank == 0;
  const ProgressStyle style = ChooseProgressStyle(options.quiet || !speaker);
  if (style != ProgressStyle::kQuiet) PrintPlan(info, *batches, plan, options);
  Trainer trainer(engine.get(), *batches, info.dp_size, options.eval_batches);
  const std::unique_ptr<Progress> progress = MakeProgress(style, config.steps_per_print);
  const LoopResult result = RunTrainingLoop(trainer, plan, *progress);

  if (!speaker) return result.interrupted ? kExitInterrupted : kExitOk;
  PrintSummary(result);
  if (!result.interrupted) return kExitOk;
  PrintInterrupted(result);
  return kExitInterrupted;
}

}  // namespace dstrain_cli
