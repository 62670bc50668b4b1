#include "report_command.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_error.h"
#include "dstrain/dstrain.h"

namespace dstrain_cli {
namespace {

using json = nlohmann::ordered_json;

constexpr size_t kLabelWidth = 22;

// A titled group of "label ..... value" rows.
struct ReportSection {
  std::string title;
  std::vector<std::pair<std::string, std::string>> rows;
};

// The value at `key` as text, or "unknown" when it is missing.
std::string Text(const json &object, const char *key) {
  const auto found = object.find(key);
  if (found == object.end() || found->is_null()) return "unknown";
  return found->is_string() ? found->get<std::string>() : found->dump();
}

bool Flag(const json &object, const char *key) {
  const auto found = object.find(key);
  return found != object.end() && found->is_boolean() && found->get<bool>();
}

const json &Child(const json &object, const char *key) {
  static const json kEmpty = json::object();
  const auto found = object.find(key);
  return found != object.end() && found->is_object() ? *found : kEmpty;
}

std::string YesNo(bool value) {
  return value ? "[YES]" : "[NO]";
}

std::string CpuFeatures(const json &features) {
  std::string text;
  for (const auto &[name, supported] : features.items()) {
    if (!text.empty()) text += "  ";
    text += name + " " + YesNo(supported.is_boolean() && supported.get<bool>());
  }
  return text.empty() ? "unknown" : text;
}

std::string BlasParallelism(const json &blas) {
  const auto found = blas.find("parallel");
  if (found == blas.end() || !found->is_number_integer()) return "unknown";
  switch (found->get<int>()) {
    case 0:
      return "sequential";
    case 1:
      return "pthreads";
    case 2:
      return "OpenMP";
    default:
      return "unknown (" + found->dump() + ")";
  }
}

// "NVIDIA H100 (cuda:0, 80 GiB, sm 9.0), ..." or "none seen (why)".
std::string Devices(const json &cuda) {
  const auto found = cuda.find("devices");
  if (found == cuda.end() || !found->is_array() || found->empty()) {
    const std::string why = Text(cuda, "why_no_device");
    return "none seen" + (why.empty() || why == "unknown" ? "" : " (" + why + ")");
  }
  std::string text;
  for (const json &device : *found) {
    if (!text.empty()) text += ", ";
    if (!device.is_object()) {
      text += device.dump();
      continue;
    }
    const double gib = device.value("total_memory", 0.0) / double(1 << 30);
    char memory[32];
    std::snprintf(memory, sizeof memory, "%.0f GiB", gib);
    text += Text(device, "name") + " (cuda:" + Text(device, "index") + ", " + memory + ", sm " +
            Text(device, "compute_capability") + ")";
  }
  return text;
}

// CUDA's version encoding (13000 = 13.0); 0 = none.
std::string CudaVersion(const json &cuda, const char *key) {
  const int v = cuda.value(key, 0);
  if (v == 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string Corpus(const json &corpus) {
  const std::string dir = Text(corpus, "dir");
  if (!Flag(corpus, "exists"))
    return dir + " [NOT FOUND] (apt-get install fortunes, or --data FILE)";
  return dir + " [FOUND] (" + Text(corpus, "files") + " files)";
}

std::string IoEngine(const json &offload) {
  const std::string refused = Text(offload, "io_uring_refused");
  if (refused.empty()) return Text(offload, "io_engine");
  return Text(offload, "io_engine") + " (io_uring refused here: " + refused + ")";
}

// "oneDNN on avx512_core_bf16 (default)", plus OpenBLAS's generic-core note.
std::string GemmRow(const json &gemm) {
  std::string row =
      Text(gemm, "backend") + " on " + Text(gemm, "target") + " (" + Text(gemm, "chosen_by") + ")";
  const std::string note = Text(gemm, "openblas_note");
  if (!note.empty()) row += "; " + note;
  return row;
}

// The library loaded and the plugins beside it (found, or why not).
std::vector<std::pair<std::string, std::string>> FileRows(const json &files) {
  std::vector<std::pair<std::string, std::string>> rows = {{"library", Text(files, "library")}};
  if (!files.contains("plugins")) return rows;
  for (const json &p : files["plugins"]) {
    const std::string path = p.value("path", "");
    std::string row = !path.empty() ? path + " [FOUND]"
                      : p.value("built", false)
                          ? p.value("file", "") + " [NOT FOUND] (not beside the library: reinstall)"
                          : std::string("not built (") + p.value("file", "") + ")";
    rows.push_back({p.value("name", "") + " plugin", row});
  }
  return rows;
}

std::vector<ReportSection> BuildSections(const json &info) {
  const json &cpu = Child(info, "cpu"), &blas = Child(info, "blas"), &cuda = Child(info, "cuda");
  return {
      {"dstrain",
       {{"version", Text(info, "version")},
        {"build type", Text(info, "build_type")},
        {"compiler", Text(info, "compiler")},
        {"test hooks", Flag(info, "test_hooks") ? "compiled in (DSTRAIN_TEST_HOOKS: a test build)"
                                                 : "none"}}},
      {"CPU",
       {{"cores", Text(cpu, "cores")},
        {"features", CpuFeatures(Child(cpu, "features"))},
        {"compiled for", Text(cpu, "compiled_for")},
        {"instruction set cap", Text(cpu, "isa_cap")}}},
      {"BLAS / threads",
       {{"library", Text(blas, "library")},
        {"core", Text(blas, "core")},
        {"threads", Text(blas, "threads") + " (" + BlasParallelism(blas) + ")"},
        {"config", Text(blas, "config")},
        {"OpenMP max threads", Text(Child(info, "openmp"), "max_threads")},
        {"fp32 GEMM", GemmRow(Child(info, "gemm"))},
        {"bf16 training GEMMs", Text(Child(info, "gemm"), "bf16_compute") + " (" +
                                    Text(Child(info, "gemm"), "bf16_compute_reason") + ")"},
        {"fp16 training GEMMs", "fp32 (no native fp16 matrix path is used on the CPU)"},
        {"GELU, softmax loops", Text(Child(info, "gemm"), "elementwise")}}},
      {"GPU",
       {{"CUDA compiled in", YesNo(Flag(cuda, "compiled"))},
        {"NCCL compiled in", YesNo(Flag(cuda, "nccl"))},
        {"devices", Devices(cuda)},
        {"kernel backend", Text(cuda, "kernel_backend")},
        {"CUDA runtime / driver",
         CudaVersion(cuda, "runtime_version") + " / " + CudaVersion(cuda, "driver_version")}}},
      {"offload / optimizer",
       {{"NVMe I/O engine", IoEngine(Child(info, "offload"))},
        {"CPU-Adam path", Text(Child(info, "offload"), "cpu_adam")}}},
      {"data", {{"default corpus", Corpus(Child(info, "default_corpus"))}}},
      {"files", FileRows(Child(info, "files"))},
  };
}

void PrintSection(const ReportSection &section) {
  std::printf("%s\n", section.title.c_str());
  for (const auto &[label, value] : section.rows) {
    std::string dotted = label + " ";
    if (dotted.size() < kLabelWidth) dotted.append(kLabelWidth - dotted.size(), '.');
    std::printf("  %s %s\n", dotted.c_str(), value.c_str());
  }
}

void PrintTable(const json &info) {
  const std::string rule(60, '-');
  std::printf("%s\ndstrain report\n%s\n", rule.c_str(), rule.c_str());
  for (const ReportSection &section : BuildSections(info)) PrintSection(section);
  std::printf("%s\n", rule.c_str());
}

}  // namespace

ReportCommand::ReportCommand(CLI::App &parent)
    : app_(parent.add_subcommand("report", "Show how dstrain was built and what it sees")) {
  app_->add_flag("--json", json_, "print the raw build-info JSON");
}

int ReportCommand::Run() {
  const char *json_text = nullptr;
  Check(dst_build_info_json(&json_text), "reading the build info");
  if (json_) {
    std::printf("%s\n", json_text);
    return kExitOk;
  }
  const json info = json::parse(json_text, nullptr, false);
  if (info.is_discarded()) {
    throw CliError(kExitFailure,
                   "the library's build info is not valid JSON: " + std::string(json_text));
  }
  PrintTable(info);
  return kExitOk;
}

}  // namespace dstrain_cli
