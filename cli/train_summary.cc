#include "train_summary.h"

#include <cstdio>
#include <string>

#include "format.h"

namespace dstrain_cli {
namespace {

std::string ValText(const std::optional<ValPoint> &point) {
  if (!point) return "n/a";
  return FormatLoss(point->loss) + " (step " + std::to_string(point->step) + ")";
}

std::string OptionalLoss(const std::optional<double> &loss) {
  return loss ? FormatLoss(*loss) : "n/a";
}

}  // namespace

void PrintSummary(const LoopResult &result) {
  const int64_t steps_run = result.end_step - result.start_step;
  const double tokens_per_second =
      result.train_seconds > 0 ? result.train_tokens / result.train_seconds : 0.0;
  std::printf("summary: %lld steps (%lld -> %lld) in %s, %s %s mean\n",
              static_cast<long long>(steps_run), static_cast<long long>(result.start_step),
              static_cast<long long>(result.end_step), FormatElapsed(result.total_seconds).c_str(),
              FormatCount(tokens_per_second).c_str(), result.rate_unit);
  std::printf("summary: validation loss %s -> %s\n", ValText(result.first_val).c_str(),
              ValText(result.last_val).c_str());
  std::printf("final: step %lld  loss %s  val %s\n", static_cast<long long>(result.end_step),
              OptionalLoss(result.last_train_loss).c_str(),
              result.last_val ? FormatLoss(result.last_val->loss).c_str() : "n/a");
  std::printf("checkpoint: %s\n", result.checkpoint.empty() ? "none (pass --save DIR to keep one)"
                                                            : result.checkpoint.c_str());
  std::fflush(stdout);
}

void PrintInterrupted(const LoopResult &result) {
  std::fprintf(
      stderr, "dstrain: interrupted after step %lld%s%s\n", static_cast<long long>(result.end_step),
      result.checkpoint.empty() ? "" : "; checkpoint saved to ", result.checkpoint.c_str());
}

}  // namespace dstrain_cli
