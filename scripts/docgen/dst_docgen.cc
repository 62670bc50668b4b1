// Prints the reference tables the documentation takes from the engine's own
// sources of truth, so a key or a metric added to the code appears in the docs
// (scripts/gen-docs.py writes them under docs/reference/; a test fails when the
// checked-in pages drift from what this prints).
//
//   dstrain_docgen config-keys   the ds_config.json key table, one table a section
//   dstrain_docgen metrics       every Prometheus series: name, type, labels, help
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/config_keys.h"
#include "metrics/registry.h"
#include "metrics/step_sample.h"

namespace {

// One metric family as the exposition describes it.
struct Family {
  std::string type, help;
  std::set<std::string> labels;  // beyond the labels every series carries
};

// Labels every series carries (MetricsRegistry's const labels).
const std::set<std::string> kCommonLabels = {"job", "rank", "dp_rank", "tp_rank", "pp_rank"};

// A sample with every optional part present, so that every family the
// registry can expose appears once.
dst::metrics::StepSample FullSample() {
  dst::metrics::StepSample sample;
  sample.step = 1;
  sample.loss = 1;
  sample.timers = {{"forward", 0.1}, {"backward", 0.1}, {"step", 0.1}};
  return sample;
}

// Adds the label names of one series line ("name{a="x",b="y"} value").
void AddLabels(std::string_view line, Family &family) {
  const size_t open = line.find('{');
  if (open == std::string_view::npos) return;
  size_t at = open + 1;
  while (at < line.size() && line[at] != '}') {
    const size_t eq = line.find('=', at);
    if (eq == std::string_view::npos) return;
    std::string label(line.substr(at, eq - at));
    if (!kCommonLabels.contains(label)) family.labels.insert(label);
    // Skip the quoted value (escapes are \" and \\).
    size_t end = eq + 2;
    while (end < line.size() && line[end] != '"') end += line[end] == '\\' ? 2 : 1;
    at = end + 1;
    if (at < line.size() && line[at] == ',') ++at;
  }
}

int PrintMetrics() {
  dst::metrics::RankIdentity identity;
  identity.offload_optimizer = "nvme";
  identity.offload_param = "nvme";
  identity.offload_io_engine = "io_uring";
  auto registry = dst::metrics::MetricsRegistry::Create(identity);
  if (!registry.ok()) {
    std::fprintf(stderr, "dstrain_docgen: %s\n", registry.status().message().c_str());
    return 1;
  }
  registry.value()->Record(FullSample());
  std::map<std::string, Family> families;
  std::istringstream text(registry.value()->Exposition());
  for (std::string line; std::getline(text, line);) {
    std::istringstream words(line);
    std::string hash, kind, name;
    if (line.starts_with("# HELP ")) {
      words >> hash >> kind >> name;
      std::string help;
      std::getline(words, help);
      families[name].help = help.empty() ? help : help.substr(1);
    } else if (line.starts_with("# TYPE ")) {
      words >> hash >> kind >> name;
      words >> families[name].type;
    } else if (!line.empty() && line[0] != '#') {
      name = line.substr(0, line.find_first_of("{ "));
      if (families.contains(name)) AddLabels(line, families[name]);
    }
  }
  std::printf("| series | type | labels | meaning |\n|---|---|---|---|\n");
  for (const auto &[name, family] : families) {
    std::string labels;
    for (const std::string &label : family.labels)
      labels += (labels.empty() ? "`" : ", `") + label + "`";
    std::printf("| `%s` | %s | %s | %s |\n", name.c_str(), family.type.c_str(),
                labels.empty() ? "" : labels.c_str(), family.help.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  const std::string what = argc == 2 ? argv[1] : "";
  if (what == "config-keys") {
    std::fputs(dst::ConfigKeysMarkdown().c_str(), stdout);
    return 0;
  }
  if (what == "metrics") return PrintMetrics();
  std::fprintf(stderr, "usage: dstrain_docgen config-keys|metrics\n");
  return 2;
}
