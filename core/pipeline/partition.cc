#include "core/pipeline/partition.h"

#include <algorithm>
#include <limits>
#include <regex>

namespace dst {

std::vector<size_t> BalancedBoundaries(const std::vector<double> &weights, int64_t parts) {
  const size_t n = weights.size(), k_max = size_t(parts);
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weights[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the lightest heaviest part over the first i layers in k parts.
  std::vector<std::vector<double>> best(k_max + 1, std::vector<double>(n + 1, inf));
  best[0][0] = 0.0;
  for (size_t k = 1; k <= k_max; ++k)
    for (size_t i = k; i <= n; ++i)
      for (size_t j = k - 1; j < i; ++j)
        best[k][i] = std::min(best[k][i], std::max(best[k - 1][j], prefix[i] - prefix[j]));
  // Back from the end: each part starts as early as the optimum allows, so
  // the early stages (which hold the most micro-batches under 1F1B) stay light.
  std::vector<size_t> bounds(k_max + 1, 0);
  bounds[k_max] = n;
  for (size_t k = k_max; k >= 1; --k) {
    const size_t i = bounds[k];
    for (size_t j = k - 1; j < i; ++j) {
      if (std::max(best[k - 1][j], prefix[i] - prefix[j]) == best[k][i]) {
        bounds[k - 1] = j;
        break;
      }
    }
  }
  return bounds;
}

namespace {

std::vector<double> UniformWeights(const std::vector<LayerCost> &layers) {
  return std::vector<double>(layers.size(), 1.0);
}

Result<std::vector<double>> TypeWeights(const std::vector<LayerCost> &layers,
                                        const std::string &pattern) {
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::icase | std::regex::ECMAScript);
  } catch (const std::regex_error &e) {
    return InvalidArgument("pipeline.partition_method \"type:" + pattern +
                           "\": not a valid regular expression (" + e.what() + ")");
  }
  std::vector<double> weights;
  double matched = 0;
  for (const LayerCost &layer : layers) {
    weights.push_back(std::regex_search(layer.kind, re) ? 1.0 : 0.0);
    matched += weights.back();
  }
  if (matched == 0) {
    std::string kinds;
    for (const LayerCost &layer : layers)
      if (kinds.find(layer.kind) == std::string::npos)
        kinds += (kinds.empty() ? "" : ", ") + layer.kind;
    return InvalidArgument("pipeline.partition_method \"type:" + pattern +
                           "\" matches none of the model's layers; their kinds are: " + kinds);
  }
  return weights;
}

}  // namespace

Result<std::vector<size_t>> PartitionLayers(const std::vector<LayerCost> &layers, int64_t parts,
                                            const std::string &method) {
  if (parts < 1 || size_t(parts) > layers.size())
    return InvalidArgument("the model has " + std::to_string(layers.size()) +
                           " layers (embedding and loss/head included), fewer than the " +
                           std::to_string(parts) +
                           " pipeline stages x virtual stages that each need at least one; use "
                           "fewer stages or more layers");
  std::vector<double> weights;
  if (method == "uniform") {
    weights = UniformWeights(layers);
  } else if (method == "parameters") {
    for (const LayerCost &layer : layers) weights.push_back(double(layer.parameters));
  } else if (method == "cost") {
    for (const LayerCost &layer : layers) weights.push_back(layer.flops);
  } else if (method.rfind("type:", 0) == 0) {
    Result<std::vector<double>> typed = TypeWeights(layers, method.substr(5));
    if (!typed.ok()) return typed.status();
    weights = std::move(typed).value();
  } else {
    return InvalidArgument("pipeline.partition_method \"" + method +
                           "\": use parameters, uniform, type:REGEX or cost");
  }
  return BalancedBoundaries(weights, parts);
}

}  // namespace dst
