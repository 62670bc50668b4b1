#include "core/tokenizer/tokenizer.h"

#include <filesystem>

#include "core/tokenizer/tokenizer_impl.h"

namespace dst {

namespace fs = std::filesystem;

Result<std::unique_ptr<Tokenizer>> Tokenizer::Open(const std::string &path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "tokenizer.json", ec))
      return OpenHfTokenizerJson((dir / "tokenizer.json").string());
    if (fs::exists(dir / "tokenizer.model", ec))
      return OpenSentencePiece((dir / "tokenizer.model").string());
    if (fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec))
      return OpenVocabMerges((dir / "vocab.json").string(), (dir / "merges.txt").string());
    return IoError(path +
                   " holds no tokenizer (tokenizer.json, tokenizer.model, or vocab.json "
                   "+ merges.txt)");
  }
  if (!fs::exists(path, ec)) return IoError("tokenizer " + path + " does not exist");
  if (fs::path(path).extension() == ".json") {
    if (fs::path(path).filename() == "vocab.json") {
      const fs::path merges = fs::path(path).parent_path() / "merges.txt";
      return OpenVocabMerges(path, merges.string());
    }
    return OpenHfTokenizerJson(path);
  }
  return OpenSentencePiece(path);
}

}  // namespace dst
