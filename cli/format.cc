#include "format.h"

#include "cli_error.h"

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

// "16GiB", "2e9", "512 MB" -> bytes; an error names the text and the forms.
int64_t ParseBytes(const std::string &text, const std::string &option) {
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception &) {
  }
  std::string unit = text.substr(used < text.size() ? used : text.size());
  unit.erase(0, unit.find_first_not_of(' '));
  const struct {
    const char *name;
    double scale;
  } units[] = {{"", 1},
               {"B", 1},
               {"K", 1e3},
               {"KB", 1e3},
               {"M", 1e6},
               {"MB", 1e6},
               {"G", 1e9},
               {"GB", 1e9},
               {"T", 1e12},
               {"TB", 1e12},
               {"KiB", 1024.0},
               {"MiB", 1048576.0},
               {"GiB", 1073741824.0},
               {"TiB", 1099511627776.0}};
  for (const auto &u : units)
    if (value > 0 && unit == u.name) return int64_t(value * u.scale);
  throw CliError(kExitUsage, option + " " + text +
                                 ": expected a positive number of bytes, optionally with a unit "
                                 "(K, M, G, T, or KiB, MiB, GiB, TiB), e.g. 16GiB");
}

}  // namespace dstrain_cli
