// Byte-level BPE as Hugging Face's tokenizers runs it from a tokenizer.json
// (or GPT-2's vocab.json + merges.txt): added tokens split out of the text
// first, the pre-tokenizer's regular expressions (ICU's engine, whose `\s`
// is Unicode White_Space as Oniguruma's is: U+0085 included, unlike
// JavaScript's; tested), each piece's UTF-8 bytes
// mapped to GPT-2's printable byte characters, then the merges applied by
// rank (the lowest first, leftmost first) and the pieces looked up.
#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/tokenizer/tokenizer_impl.h"
#include "core/tokenizer/utf8.h"

namespace dst {

namespace {

using Json = nlohmann::json;

// GPT-2's regular expression, which ByteLevel's use_regex applies.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Byte b as GPT-2's bytes_to_unicode writes it (printable bytes as
// themselves, the rest from U+0100 on), in UTF-8.
struct ByteChars {
  std::string of[256];
  std::unordered_map<std::string, uint8_t> back;
  ByteChars() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const UChar32 c = printable ? b : 256 + next++;
      icu::UnicodeString(c).toUTF8String(of[b]);
      back[of[b]] = uint8_t(b);
    }
  }
};

const ByteChars &Bytes() {
  static const ByteChars bytes;
  return bytes;
}

enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext };

// One split of the pre-tokenizer.
struct SplitStep {
  std::shared_ptr<icu::RegexPattern> pattern;  // null: no split
  Behavior behavior = Behavior::kIsolated;
  bool prefix_space = false;  // ByteLevel's add_prefix_space
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool lstrip = false, rstrip = false;
};

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

class BpeTokenizer final : public Tokenizer {
 public:
  const char *kind() const override { return "bpe"; }
  int64_t vocab_size() const override { return int64_t(id_to_token_.size()); }
  int32_t eos_id() const override { return eos_; }
  int32_t bos_id() const override { return bos_; }

  void Encode(std::string_view text, bool add_special, std::vector<int32_t> *ids) const override {
    if (add_special) ids->insert(ids->end(), prefix_.begin(), prefix_.end());
    std::string valid = ValidUtf8(text);
    if (nfc_) {
      UErrorCode st = U_ZERO_ERROR;
      const icu::Normalizer2 *n = icu::Normalizer2::getNFCInstance(st);
      icu::UnicodeString u = icu::UnicodeString::fromUTF8(valid), normalized;
      n->normalize(u, normalized, st);
      valid.clear();
      normalized.toUTF8String(valid);
    }
    // Added tokens split the text; the rest goes through the pre-tokenizer.
    size_t begin = 0, at = 0;
    while (at < valid.size()) {
      const AddedToken *hit = added_first_[uint8_t(valid[at])] ? MatchAdded(valid, at) : nullptr;
      if (!hit) {
        ++at;
        continue;
      }
      size_t seg_end = at, next = at + hit->content.size();
      if (hit->lstrip)
        while (seg_end > begin && IsSpace(valid[seg_end - 1])) --seg_end;
      if (hit->rstrip)
        while (next < valid.size() && IsSpace(valid[next])) ++next;
      EncodeSegment(std::string_view(valid).substr(begin, seg_end - begin), ids);
      ids->push_back(hit->id);
      begin = at = next;
    }
    EncodeSegment(std::string_view(valid).substr(begin), ids);
    if (add_special) ids->insert(ids->end(), suffix_.begin(), suffix_.end());
  }

  std::string Decode(const int32_t *ids, size_t n) const override {
    std::string out, pending;
    const ByteChars &bytes = Bytes();
    const auto flush = [&] {
      if (!byte_level_) {
        out += pending;
      } else {  // each UTF-8 character of the pieces is one byte
        const auto *s = reinterpret_cast<const uint8_t *>(pending.data());
        int32_t i = 0, len = int32_t(pending.size());
        while (i < len) {
          const int32_t start = i;
          UChar32 c;
          U8_NEXT(s, i, len, c);
          auto it = bytes.back.find(pending.substr(size_t(start), size_t(i - start)));
          if (it != bytes.back.end())
            out += char(it->second);
          else if (c >= 0)
            out.append(pending, size_t(start), size_t(i - start));
        }
      }
      pending.clear();
    };
    for (size_t k = 0; k < n; ++k) {
      if (ids[k] < 0 || ids[k] >= int32_t(id_to_token_.size())) continue;
      if (is_added_[size_t(ids[k])]) {
        flush();
        out += id_to_token_[size_t(ids[k])];
      } else {
        pending += id_to_token_[size_t(ids[k])];
      }
    }
    flush();
    return out;
  }

  Status Build(const Json &root, const std::string &where);
  Status BuildVocabMerges(const Json &vocab, std::istream &merges, const std::string &where);
  void SetSpecialIds(const Json &config);

 private:
  const AddedToken *MatchAdded(const std::string &text, size_t at) const {
    for (const AddedToken &t : added_)  // longest first
      if (text.compare(at, t.content.size(), t.content) == 0) return &t;
    return nullptr;
  }
  void EncodeSegment(std::string_view segment, std::vector<int32_t> *ids) const;
  void Split(const SplitStep &step, std::vector<std::string> *pieces) const;
  void EncodeWord(const std::string &word, std::vector<int32_t> *ids) const;
  Status AddVocab(const Json &vocab, const std::string &where);
  Status AddMerge(const std::string &a, const std::string &b, const std::string &where);
  void Finish();

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> is_added_;
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::vector<AddedToken> added_;
  bool added_first_[256] = {};
  std::vector<SplitStep> steps_;
  bool byte_level_ = false, ignore_merges_ = false, nfc_ = false;
  int32_t unk_ = -1, eos_ = -1, bos_ = -1;
  std::vector<int32_t> prefix_, suffix_;
};

void BpeTokenizer::Split(const SplitStep &step, std::vector<std::string> *pieces) const {
  std::vector<std::string> out;
  for (std::string &piece : *pieces) {
    if (step.prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(0, 1, ' ');
    if (!step.pattern) {
      out.push_back(std::move(piece));
      continue;
    }
    const icu::UnicodeString u = icu::UnicodeString::fromUTF8(piece);
    UErrorCode st = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> m(step.pattern->matcher(u, st));
    int32_t last = 0;
    std::vector<std::pair<icu::UnicodeString, bool>> parts;
    while (U_SUCCESS(st) && m->find(st)) {
      const int32_t b = m->start(st), e = m->end(st);
      if (e == b) continue;
      if (b > last) parts.push_back({u.tempSubString(last, b - last), false});
      parts.push_back({u.tempSubString(b, e - b), true});
      last = e;
    }
    if (last < u.length()) parts.push_back({u.tempSubString(last), false});
    std::string carry;  // MergedWithNext: a match waiting for what follows
    for (size_t i = 0; i < parts.size(); ++i) {
      std::string s;
      parts[i].first.toUTF8String(s);
      const bool match = parts[i].second;
      switch (step.behavior) {
        case Behavior::kIsolated:
          out.push_back(std::move(s));
          break;
        case Behavior::kRemoved:
          if (!match) out.push_back(std::move(s));
          break;
        case Behavior::kMergedWithPrevious:
          if (match && i > 0 && !parts[i - 1].second && !out.empty())
            out.back() += s;
          else
            out.push_back(std::move(s));
          break;
        case Behavior::kMergedWithNext:
          if (match) {
            carry += s;
          } else {
            out.push_back(carry + s);
            carry.clear();
          }
          break;
      }
    }
    if (!carry.empty()) out.push_back(std::move(carry));
  }
  *pieces = std::move(out);
}

void BpeTokenizer::EncodeSegment(std::string_view segment, std::vector<int32_t> *ids) const {
  if (segment.empty()) return;
  std::vector<std::string> pieces{std::string(segment)};
  for (const SplitStep &step : steps_) Split(step, &pieces);
  // A thread's cache of words already encoded (text repeats them).
  struct Cache {
    const void *owner = nullptr;
    std::unordered_map<std::string, std::vector<int32_t>> words;
  };
  thread_local Cache cache;
  if (cache.owner != this || cache.words.size() > (1u << 16)) {
    cache.words.clear();
    cache.owner = this;
  }
  for (const std::string &piece : pieces) {
    if (piece.empty()) continue;
    auto it = cache.words.find(piece);
    if (it == cache.words.end()) {
      std::vector<int32_t> word;
      if (byte_level_) {
        std::string mapped;
        for (unsigned char c : piece) mapped += Bytes().of[c];
        EncodeWord(mapped, &word);
      } else {
        EncodeWord(piece, &word);
      }
      it = cache.words.emplace(piece, std::move(word)).first;
    }
    ids->insert(ids->end(), it->second.begin(), it->second.end());
  }
}

void BpeTokenizer::EncodeWord(const std::string &word, std::vector<int32_t> *ids) const {
  if (ignore_merges_)
    if (auto whole = vocab_.find(word); whole != vocab_.end()) return ids->push_back(whole->second);
  std::vector<int32_t> sym;
  const auto *s = reinterpret_cast<const uint8_t *>(word.data());
  int32_t i = 0, n = int32_t(word.size());
  while (i < n) {
    const int32_t start = i;
    UChar32 c;
    U8_NEXT(s, i, n, c);
    auto it = vocab_.find(word.substr(size_t(start), size_t(i - start)));
    if (it != vocab_.end())
      sym.push_back(it->second);
    else if (unk_ >= 0)
      sym.push_back(unk_);
  }
  const auto key = [](int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); };
  while (sym.size() > 1) {
    int32_t best = INT32_MAX, merged = -1;
    for (size_t k = 0; k + 1 < sym.size(); ++k)
      if (auto m = merges_.find(key(sym[k], sym[k + 1]));
          m != merges_.end() && m->second.first < best) {
        best = m->second.first;
        merged = m->second.second;
      }
    if (merged < 0) break;
    const auto [a, b] = [&] {
      for (size_t k = 0; k + 1 < sym.size(); ++k)
        if (auto m = merges_.find(key(sym[k], sym[k + 1]));
            m != merges_.end() && m->second.first == best)
          return std::pair{sym[k], sym[k + 1]};
      return std::pair{-1, -1};
    }();
    std::vector<int32_t> next;
    next.reserve(sym.size());
    for (size_t k = 0; k < sym.size(); ++k) {
      if (k + 1 < sym.size() && sym[k] == a && sym[k + 1] == b) {
        next.push_back(merged);
        ++k;
      } else {
        next.push_back(sym[k]);
      }
    }
    sym = std::move(next);
  }
  ids->insert(ids->end(), sym.begin(), sym.end());
}

Status BpeTokenizer::AddVocab(const Json &vocab, const std::string &where) {
  if (!vocab.is_object()) return ConfigError(where + ": model.vocab is not an object");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
      return ConfigError(where + ": vocabulary entry '" + it.key() + "' has no id >= 0");
    const int32_t id = it.value().get<int32_t>();
    vocab_[it.key()] = id;
    if (size_t(id) >= id_to_token_.size()) id_to_token_.resize(size_t(id) + 1);
    id_to_token_[size_t(id)] = it.key();
  }
  return Status::Ok();
}

Status BpeTokenizer::AddMerge(const std::string &a, const std::string &b,
                              const std::string &where) {
  auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
  if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end())
    return ConfigError(where + ": merge \"" + a + " " + b +
                       "\" names a token not in the vocabulary");
  const uint64_t k = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
  merges_.emplace(k, std::pair{int32_t(merges_.size()), im->second});
  return Status::Ok();
}

void BpeTokenizer::Finish() {
  is_added_.assign(id_to_token_.size(), 0);
  for (const AddedToken &t : added_) {
    if (size_t(t.id) >= id_to_token_.size()) {
      id_to_token_.resize(size_t(t.id) + 1);
      is_added_.resize(id_to_token_.size(), 0);
    }
    id_to_token_[size_t(t.id)] = t.content;
    is_added_[size_t(t.id)] = 1;
    if (!t.content.empty()) added_first_[uint8_t(t.content[0])] = true;
  }
  std::stable_sort(added_.begin(), added_.end(), [](const AddedToken &a, const AddedToken &b) {
    return a.content.size() > b.content.size();
  });
}

Result<SplitStep> RegexStep(const std::string &pattern, Behavior behavior,
                            const std::string &where) {
  UErrorCode st = U_ZERO_ERROR;
  UParseError pe;
  std::shared_ptr<icu::RegexPattern> p(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(pattern), 0, pe, st));
  if (U_FAILURE(st))
    return NotSupported(where + ": the pre-tokenizer's regular expression \"" + pattern +
                        "\" does not compile (" + u_errorName(st) + ")");
  SplitStep s;
  s.pattern = std::move(p);
  s.behavior = behavior;
  return s;
}

// One pre-tokenizer of tokenizer.json into steps.
Status AddPreTokenizer(const Json &p, const std::string &where, std::vector<SplitStep> *steps,
                       bool *byte_level) {
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const Json &inner : p.value("pretokenizers", Json::array()))
      DST_RETURN_IF_ERROR(AddPreTokenizer(inner, where, steps, byte_level));
    return Status::Ok();
  }
  if (*byte_level)
    return NotSupported(where + ": a pre-tokenizer after ByteLevel (" + type +
                        ") is not supported yet");
  if (type == "ByteLevel") {
    *byte_level = true;
    SplitStep s;
    if (p.value("use_regex", true)) {
      Result<SplitStep> r = RegexStep(kGpt2Pattern, Behavior::kIsolated, where);
      DST_RETURN_IF_ERROR(r.status());
      s = std::move(r).value();
    }
    s.prefix_space = p.value("add_prefix_space", false);
    steps->push_back(std::move(s));
    return Status::Ok();
  }
  if (type == "Split") {
    const Json &pattern = p.value("pattern", Json::object());
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = pattern.at("Regex").get<std::string>();
    } else if (pattern.contains("String")) {  // a literal
      const std::string lit = pattern.at("String").get<std::string>();
      for (char c : lit) {
        if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) regex += '\\';
        regex += c;
      }
    } else {
      return ConfigError(where + ": a Split pre-tokenizer without a pattern");
    }
    if (p.value("invert", false))
      return NotSupported(where + ": an inverted Split pre-tokenizer is not supported yet");
    const std::string b = p.value("behavior", "Isolated");
    const Behavior behavior = b == "Removed"              ? Behavior::kRemoved
                              : b == "MergedWithPrevious" ? Behavior::kMergedWithPrevious
                              : b == "MergedWithNext"     ? Behavior::kMergedWithNext
                                                          : Behavior::kIsolated;
    if (b != "Isolated" && b != "Removed" && b != "MergedWithPrevious" && b != "MergedWithNext")
      return NotSupported(where + ": Split behavior \"" + b + "\" is not supported yet");
    Result<SplitStep> r = RegexStep(regex, behavior, where);
    DST_RETURN_IF_ERROR(r.status());
    steps->push_back(std::move(r).value());
    return Status::Ok();
  }
  return NotSupported(where + ": the pre-tokenizer \"" + type +
                      "\" is not supported yet (byte-level BPE reads ByteLevel, Split and "
                      "Sequence); a SentencePiece model's tokenizer.model is read instead");
}

// The ids a TemplateProcessing's single template puts before and after the text.
Status AddTemplate(const Json &post, const std::string &where, std::vector<int32_t> *prefix,
                   std::vector<int32_t> *suffix) {
  if (post.is_null()) return Status::Ok();
  const std::string type = post.value("type", "");
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence") {
    for (const Json &inner : post.value("processors", Json::array()))
      DST_RETURN_IF_ERROR(AddTemplate(inner, where, prefix, suffix));
    return Status::Ok();
  }
  if (type != "TemplateProcessing")
    return NotSupported(where + ": the post-processor \"" + type + "\" is not supported yet");
  const Json &specials = post.value("special_tokens", Json::object());
  bool after = false;
  for (const Json &item : post.value("single", Json::array())) {
    if (item.contains("Sequence")) {
      after = true;
      continue;
    }
    if (!item.contains("SpecialToken")) continue;
    const std::string name = item.at("SpecialToken").value("id", "");
    if (!specials.contains(name))
      return ConfigError(where + ": the post-processor names special token '" + name +
                         "' without its ids");
    for (const Json &id : specials.at(name).value("ids", Json::array()))
      (after ? suffix : prefix)->push_back(id.get<int32_t>());
  }
  return Status::Ok();
}

Status BpeTokenizer::Build(const Json &root, const std::string &where) {
  const Json &model = root.value("model", Json::object());
  const std::string type = model.value("type", "BPE");
  if (type != "BPE")
    return NotSupported(where + ": the model \"" + type +
                        "\" is not supported yet (byte-level BPE only)");
  if (model.value("byte_fallback", false))
    return NotSupported(where +
                        ": a byte-fallback BPE (a SentencePiece model converted to "
                        "tokenizer.json, e.g. LLaMA 2's) is not read from tokenizer.json: pass "
                        "its tokenizer.model");
  for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model.at(key).is_null() && model.at(key) != "")
      return NotSupported(where + ": BPE's " + key + " is not supported yet");
  DST_RETURN_IF_ERROR(AddVocab(model.value("vocab", Json::object()), where));
  if (vocab_.empty()) return ConfigError(where + ": its model has no vocabulary");
  for (const Json &m : model.value("merges", Json::array())) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos)
        return ConfigError(where + ": merge \"" + s + "\" has no space");
      a = s.substr(0, space), b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      return ConfigError(where + ": a merge is neither \"a b\" nor [a, b]");
    }
    DST_RETURN_IF_ERROR(AddMerge(a, b, where));
  }
  ignore_merges_ = model.value("ignore_merges", false);
  if (model.contains("unk_token") && model.at("unk_token").is_string())
    if (auto it = vocab_.find(model.at("unk_token").get<std::string>()); it != vocab_.end())
      unk_ = it->second;
  const Json &normalizer = root.value("normalizer", Json());
  if (!normalizer.is_null()) {
    if (normalizer.value("type", "") != "NFC")
      return NotSupported(where + ": the normalizer \"" + normalizer.value("type", "") +
                          "\" is not supported yet (none or NFC)");
    nfc_ = true;
  }
  const Json &pre = root.value("pre_tokenizer", Json());
  if (!pre.is_null()) DST_RETURN_IF_ERROR(AddPreTokenizer(pre, where, &steps_, &byte_level_));
  const Json &decoder = root.value("decoder", Json());
  if (!decoder.is_null() && decoder.value("type", "") != "ByteLevel")
    return NotSupported(where + ": the decoder \"" + decoder.value("type", "") +
                        "\" is not supported yet (ByteLevel)");
  DST_RETURN_IF_ERROR(AddTemplate(root.value("post_processor", Json()), where, &prefix_, &suffix_));
  for (const Json &t : root.value("added_tokens", Json::array()))
    added_.push_back({t.value("content", ""), t.value("id", 0), t.value("lstrip", false),
                      t.value("rstrip", false)});
  Finish();
  return Status::Ok();
}

Status BpeTokenizer::BuildVocabMerges(const Json &vocab, std::istream &merges,
                                      const std::string &where) {
  DST_RETURN_IF_ERROR(AddVocab(vocab, where));
  std::string line;
  while (std::getline(merges, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t space = line.find(' ', 1);
    if (space == std::string::npos)
      return ConfigError(where + ": merge \"" + line + "\" has no space");
    DST_RETURN_IF_ERROR(AddMerge(line.substr(0, space), line.substr(space + 1), where));
  }
  byte_level_ = true;
  Result<SplitStep> r = RegexStep(kGpt2Pattern, Behavior::kIsolated, where);
  DST_RETURN_IF_ERROR(r.status());
  steps_.push_back(std::move(r).value());
  if (auto it = vocab_.find("<|endoftext|>"); it != vocab_.end())
    added_.push_back({"<|endoftext|>", it->second, false, false});
  Finish();
  return Status::Ok();
}

// tokenizer_config.json's bos_token / eos_token (a string or {"content": ...}),
// else the usual names.
void BpeTokenizer::SetSpecialIds(const Json &config) {
  const auto id_of = [&](const Json &v) -> int32_t {
    std::string name = v.is_string()   ? v.get<std::string>()
                       : v.is_object() ? v.value("content", "")
                                       : "";
    auto it = vocab_.find(name);
    if (it != vocab_.end()) return it->second;
    for (const AddedToken &t : added_)
      if (t.content == name) return t.id;
    return -1;
  };
  if (config.is_object()) {
    if (config.contains("eos_token")) eos_ = id_of(config.at("eos_token"));
    if (config.contains("bos_token")) bos_ = id_of(config.at("bos_token"));
  }
  for (const char *name : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
    if (eos_ < 0) eos_ = id_of(Json(name));
  for (const char *name : {"<|begin_of_text|>", "<s>"})
    if (bos_ < 0) bos_ = id_of(Json(name));
}

Result<Json> ReadJson(const std::string &path) {
  std::ifstream in(path);
  if (!in) return IoError("cannot read " + path);
  Json j = Json::parse(in, nullptr, false);
  if (j.is_discarded()) return ConfigError(path + " is not valid JSON");
  return j;
}

Json SiblingConfig(const std::string &path) {
  const std::filesystem::path config =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  Result<Json> j = ReadJson(config.string());
  return j.ok() ? j.value() : Json();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> OpenHfTokenizerJson(const std::string &path) {
  Result<Json> root = ReadJson(path);
  DST_RETURN_IF_ERROR(root.status());
  auto t = std::make_unique<BpeTokenizer>();
  DST_RETURN_IF_ERROR(t->Build(root.value(), path));
  t->SetSpecialIds(SiblingConfig(path));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Result<std::unique_ptr<Tokenizer>> OpenVocabMerges(const std::string &vocab,
                                                   const std::string &merges) {
  Result<Json> v = ReadJson(vocab);
  DST_RETURN_IF_ERROR(v.status());
  std::ifstream in(merges);
  if (!in) return IoError("cannot read " + merges);
  auto t = std::make_unique<BpeTokenizer>();
  DST_RETURN_IF_ERROR(t->BuildVocabMerges(v.value(), in, vocab + " + " + merges));
  t->SetSpecialIds(SiblingConfig(vocab));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace dst
