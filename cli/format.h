// Number formatting shared by the progress display and the summaries.
#pragma once

#include <cstdint>
#include <string>

namespace dstrain_cli {

// "0:42", "12:05", "1:02:03".
std::string FormatDuration(double seconds);
// "0.8s", "42.0s" under a minute, else as FormatDuration.
std::string FormatElapsed(double seconds);
// "950", "12.3k", "1.2M".
std::string FormatCount(double value);
// "2.1340".
std::string FormatLoss(double loss);
// "8.1e-04".
std::string FormatLearningRate(double lr);
// "16GiB", "2e9", "512 MB" -> bytes; a usage error names `option`, the text and the forms.
int64_t ParseBytes(const std::string &text, const std::string &option);

}  // namespace dstrain_cli
