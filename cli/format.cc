#include "format.h"

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace dstrain_cli {

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?:??";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  const int64_t hours = total / 3600, minutes = (total / 60) % 60, secs = total % 60;
  char text[32];
  if (hours > 0) {
    std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", static_cast<long long>(hours),
                  static_cast<long long>(minutes), static_cast<long long>(secs));
  } else {
    std::snprintf(text, sizeof(text), "%lld:%02lld", static_cast<long long>(minutes),
                  static_cast<long long>(secs));
  }
  return text;
}

std::string FormatElapsed(double seconds) {
  if (!(seconds < 60.0)) return FormatDuration(seconds);
  char text[32];
  std::snprintf(text, sizeof(text), "%.1fs", seconds);
  return text;
}

std::string FormatCount(double value) {
  char text[32];
  if (value >= 1e6) {
    std::snprintf(text, sizeof(text), "%.1fM", value / 1e6);
  } else if (value >= 1e3) {
    std::snprintf(text, sizeof(text), "%.1fk", value / 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%.0f", value);
  }
  return text;
}

std::string FormatLoss(double loss) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4f", loss);
  return text;
}

std::string FormatLearningRate(double lr) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1e", lr);
  return text;
}

}  // namespace dstrain_cli
