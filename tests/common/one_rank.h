// One rank's training stack over a group of one — model, data-parallel layer
// (ZeRO stage and precision from the config), loss scaler, executor — that
// runs a program for some steps on deterministic batches. The executor tests
// run it on the host; the step-seam tests run it with every buffer in a given
// memory and every kernel through given backends (a device stand-in).
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/engine/executor.h"
#include "core/engine/schedule.h"
#include "core/kernels/kernels.h"
#include "core/kernels/step_kernels.h"
#include "core/model/model.h"
#include "core/model/model_spec.h"
#include "core/precision/loss_scaler.h"
#include "core/zero/data_parallel.h"

namespace dst {

// Where the rank's buffers live and what computes on them (default: the host).
struct RankPlacement {
  StepPlacement step;                       // memory + step backend
  const Kernels<float> *kernels = nullptr;  // the layers' backend (null: the CPU's)
};

struct Rank {
  Rank(const char *spec_text, const Config &c, ActivationOptions activations,
       RankPlacement placement = {})
      : config(c), comm(MakeSoloCommunicator("dp")), scaler(config.fp16) {
    Result<ModelSpec> parsed = ParseModelSpec(spec_text);
    EXPECT_TRUE(parsed.ok()) << parsed.status().message();
    const ModelSpec &spec = parsed.value();
    // Scratch for as many threads as the kernels will use.
    ActivationLimits limits{config.train_micro_batch_size_per_gpu,
                            spec.IsLanguageModel() ? spec.lm.n_ctx : 1,
                            omp_get_max_threads()};
    const bool mixed = config.precision() != DType::kFloat32;
    if (mixed) activations.half = config.precision() == DType::kFloat16 ? Half::kFp16 : Half::kBf16;
    model = std::make_unique<Model<float>>(
        spec, limits, &tracker, StoreOptionsForStage(config.zero.stage, 1, config.precision()),
        activations, ModelPart{}, placement.step.memory);
    if (placement.kernels) model->SetKernels(*placement.kernels);
    dp = std::make_unique<DataParallel>(config, model.get(), comm.get(), &tracker, nullptr,
                                        ParamSwapOptions{}, placement.step);
    const Status started = dp->Start();
    EXPECT_TRUE(started.ok()) << started.message();
    executor = std::make_unique<Executor>(config, model.get(), dp.get(), &scaler, &progress);
    if (placement.step.memory) executor->StageBatchesIn(placement.step.memory, &tracker);
  }

  // Runs `program` (prepared here) for `steps` steps on deterministic
  // batches; returns every step's loss followed by the final weights.
  std::vector<float> Train(std::vector<Instruction> program, int steps) {
    const int64_t micro = config.train_micro_batch_size_per_gpu;
    const int64_t m = config.gradient_accumulation_steps;
    Status st = PrepareProgram(&program, m, model->activation_slots());
    EXPECT_TRUE(st.ok()) << st.message();
    std::vector<float> out;
    for (int step = 0; step < steps; ++step) {
      StepRecord record;
      Status run = Run(program, micro * m, step, &record);
      EXPECT_TRUE(run.ok()) << run.message();
      out.push_back(float(record.loss));
    }
    const std::vector<ParamDecl> &decls = model->params().decls();
    for (size_t id = 0; id < decls.size(); ++id) {
      std::vector<float> w(size_t(decls[id].numel));
      EXPECT_TRUE(dp->ReadParam(int(id), w.data()).ok());
      out.insert(out.end(), w.begin(), w.end());
    }
    return out;
  }

  // Runs a prepared `program` over `samples` deterministic samples of `step`.
  Status Run(const std::vector<Instruction> &program, int64_t samples, int step,
             StepRecord *record) {
    const ModelSpec &spec = model->spec();
    BatchView batch;
    batch.n_samples = size_t(samples);
    std::vector<int32_t> tokens, targets;
    std::vector<float> inputs, labels;
    if (spec.IsLanguageModel()) {
      const int64_t T = spec.lm.n_ctx;
      for (int64_t i = 0; i < samples * T; ++i) {
        tokens.push_back(int32_t((i * 7 + step * 13 + i / T) % spec.lm.vocab));
        targets.push_back(int32_t((i * 5 + step * 3 + 1) % spec.lm.vocab));
      }
      batch.seq_len = size_t(T);
      batch.tokens = tokens.data(), batch.tokens_count = tokens.size();
      batch.targets = targets.data(), batch.targets_count = targets.size();
    } else {
      for (int64_t i = 0; i < samples * spec.input_dim; ++i)
        inputs.push_back(float((i * 37 + step * 11) % 17) / 8.0f - 1.0f);
      for (int64_t i = 0; i < samples * spec.SequentialOutputDim(); ++i)
        labels.push_back(float((i * 29 + step) % 13) / 6.0f - 1.0f);
      batch.inputs = inputs.data(), batch.inputs_count = inputs.size();
      batch.labels = labels.data(), batch.labels_count = labels.size();
    }
    return executor->Run(program, batch, record);
  }

  Config config;
  MemoryTracker tracker;
  std::unique_ptr<Communicator> comm;
  LossScaler scaler;
  TrainingProgress progress;
  std::unique_ptr<Model<float>> model;
  std::unique_ptr<DataParallelism> dp;
  std::unique_ptr<Executor> executor;
};

// Three training steps of `config` (its gradient_accumulation_steps
// micro-batches each), then a forward_backward whose gradients are read:
// values = the losses, the final weights, every gradient. `closed` wraps the
// steps (the seam tests close the memory around them).
struct StepsOutcome {
  std::vector<float> values;
  std::string error;  // empty when every step ran
};

inline StepsOutcome TrainThenReadGradients(
    const char *spec, const Config &config, RankPlacement placement,
    const std::function<void(const std::function<void()> &)> &closed =
        [](const std::function<void()> &steps) { steps(); }) {
  Rank rank(spec, config, ActivationOptions{}, placement);
  const int64_t m = config.gradient_accumulation_steps;
  std::vector<Instruction> grads = ForwardBackwardSchedule(m);
  Status st = PrepareProgram(&grads, m, rank.model->activation_slots());
  StepsOutcome outcome;
  closed([&] {
    outcome.values = rank.Train(TrainSchedule(m), 3);
    StepRecord record;
    if (st.ok()) st = rank.Run(grads, config.train_batch_size, 3, &record);
    const std::vector<ParamDecl> &decls = rank.model->params().decls();
    for (size_t id = 0; id < decls.size() && st.ok(); ++id) {
      std::vector<float> g(size_t(decls[id].numel));
      st = rank.dp->ReadGrad(int(id), g.data());
      outcome.values.insert(outcome.values.end(), g.begin(), g.end());
    }
  });
  if (!st.ok()) outcome.error = st.message();
  return outcome;
}

}  // namespace dst
