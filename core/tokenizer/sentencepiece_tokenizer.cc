// A SentencePiece model (tokenizer.model) through libsentencepiece, which
// the plugin libdstrain_sentencepiece.so links (sentencepiece/spm_api.h).
#include <mutex>

#include "core/runtime/plugin.h"
#include "core/tokenizer/sentencepiece/spm_api.h"
#include "core/tokenizer/tokenizer_impl.h"
#include "core/tokenizer/utf8.h"

#ifndef DSTRAIN_SENTENCEPIECE_PLUGIN_BUILD_PATH
#define DSTRAIN_SENTENCEPIECE_PLUGIN_BUILD_PATH nullptr
#endif

namespace dst {

namespace {

struct SpmPlugin {
  const DstSpmApi *api = nullptr;
  std::string error;
};

const SpmPlugin &LoadSpm() {
  static SpmPlugin plugin;
  static std::once_flag once;
  std::call_once(once, [] {
    const OpenedPlugin opened =
        OpenPlugin({"libdstrain_sentencepiece.so", "DSTRAIN_SENTENCEPIECE_PLUGIN",
                    DSTRAIN_SENTENCEPIECE_PLUGIN_BUILD_PATH, "dst_sentencepiece_plugin",
                    "libsentencepiece (Debian: libsentencepiece0)"});
    if (opened.entry) plugin.api = reinterpret_cast<DstSpmEntry>(opened.entry)();
    plugin.error = opened.error;
  });
  return plugin;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const DstSpmApi *api, void *model) : api_(api), model_(model) {
    std::vector<int32_t> spaced, plain;
    Encode(" x y", false, &spaced);
    Encode("x y", false, &plain);
    cut_safe_ = spaced == plain;
  }
  bool CutBeforeSpaceIsSafe() const override { return cut_safe_; }
  ~SentencePieceTokenizer() override { api_->close(model_); }
  const char *kind() const override { return "sentencepiece"; }
  int64_t vocab_size() const override { return api_->piece_size(model_); }
  void Encode(std::string_view text, bool add_special, std::vector<int32_t> *ids) const override {
    if (add_special && bos_id() >= 0) ids->push_back(bos_id());
    const std::string valid = ValidUtf8(text);
    const int32_t *out = nullptr;
    const int64_t n = api_->encode(model_, valid.data(), valid.size(), &out);
    ids->insert(ids->end(), out, out + n);
  }
  std::string Decode(const int32_t *ids, size_t n) const override {
    std::vector<int32_t> in;
    in.reserve(n);
    for (size_t i = 0; i < n; ++i)
      if (ids[i] >= 0 && ids[i] < vocab_size()) in.push_back(ids[i]);
    const char *text = nullptr;
    const int64_t len = api_->decode(model_, in.data(), in.size(), &text);
    return std::string(text, size_t(len));
  }
  int32_t eos_id() const override { return api_->eos_id(model_); }
  int32_t bos_id() const override { return api_->bos_id(model_); }

 private:
  const DstSpmApi *api_;
  void *model_;
  bool cut_safe_ = false;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> OpenSentencePiece(const std::string &path) {
  const SpmPlugin &plugin = LoadSpm();
  if (!plugin.api)
    return NotSupported("SentencePiece model " + path +
                        ": the SentencePiece plugin could not be loaded (" + plugin.error + ")");
  char err[512] = {0};
  void *model = plugin.api->open(path.c_str(), err, sizeof err);
  if (!model)
    return IoError("SentencePiece model " + path + " could not be read: " + err +
                   " (expected a tokenizer.model written by spm_train or shipped with the model)");
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(plugin.api, model));
}

}  // namespace dst
