#include "core/config/json_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace dst::config_internal {
namespace {

// Messages quote at most this much of a value or of the source text.
constexpr size_t kMaxShown = 48;

// Cuts `text` to `limit` bytes without splitting a UTF-8 sequence.
std::string TruncateUtf8(std::string text, size_t limit) {
  if (text.size() <= limit) return text;
  size_t cut = limit - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text + "...";
}

std::string DumpScalar(const Json &value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Renders containers only a couple of levels deep: a found value can be an
// arbitrarily large (or deeply nested) structure, and the message only needs
// its shape.
void Render(const Json &value, int depth, std::string *out) {
  constexpr int kMaxDepth = 2;
  constexpr size_t kMaxItems = 3;
  if (!value.is_structured()) {
    *out += DumpScalar(value);
    return;
  }
  const bool is_object = value.is_object();
  const char *open = is_object ? "{" : "[";
  const char *close = is_object ? "}" : "]";
  if (value.empty()) {
    *out += std::string(open) + close;
    return;
  }
  if (depth >= kMaxDepth) {
    *out += std::string(open) + "..." + close;
    return;
  }
  *out += open;
  size_t shown = 0;
  for (auto it = value.begin(); it != value.end() && out->size() <= kMaxShown; ++it) {
    if (shown == kMaxItems) break;
    if (shown++ > 0) *out += ", ";
    if (is_object) *out += DumpScalar(Json(it.key())) + ": ";
    Render(*it, depth + 1, out);
  }
  if (shown < value.size()) *out += ", ...";
  *out += close;
}

// Printable ASCII only: the message travels through C strings and logs.
std::string Printable(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    out += (byte == '\t') ? ' ' : (byte < 0x20 || byte >= 0x7F) ? '?' : c;
  }
  return out;
}

// The source around a syntax error, from its line only.
std::string SnippetAround(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  const size_t line_start = text.rfind('\n', offset == 0 ? 0 : offset - 1);
  const size_t begin_of_line =
      (line_start == std::string_view::npos || line_start >= offset) ? 0 : line_start + 1;
  size_t end_of_line = text.find('\n', offset);
  if (end_of_line == std::string_view::npos) end_of_line = text.size();
  constexpr size_t kBefore = 30, kAfter = 10;
  const size_t begin = std::max(begin_of_line, offset > kBefore ? offset - kBefore : 0);
  const size_t end = std::min(end_of_line, offset + kAfter);
  return Printable(text.substr(begin, end - begin));
}

// nlohmann's message without its own position prefix and without the
// "last read" token, which we replace by a snippet of the line.
std::string SyntaxDetail(std::string message) {
  if (const size_t bracket = message.find("] "); bracket != std::string::npos) {
    message.erase(0, bracket + 2);
  }
  if (message.rfind("parse error", 0) == 0) {
    if (const size_t colon = message.find(": "); colon != std::string::npos) {
      message.erase(0, colon + 2);
    }
  }
  constexpr std::string_view kLastRead = "; last read: '";
  if (const size_t start = message.find(kLastRead); start != std::string::npos) {
    const size_t end = message.find("'; ", start + kLastRead.size());
    if (end == std::string::npos) {
      message.erase(start);
    } else {
      message.erase(start, end + 1 - start);
    }
  }
  return Printable(message);
}

bool IsBlank(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

// A SAX pass that only validates: it records the first syntax error with its
// byte offset, and the first duplicate key with its path. (The DOM parser
// reports neither: it lets duplicates overwrite and turns number overflow into
// an exception without a position.)
class StrictChecker : public nlohmann::json_sax<Json> {
 public:
  std::optional<std::pair<size_t, std::string>> syntax_error;    // offset, detail
  std::optional<std::pair<std::string, std::string>> duplicate;  // object path, key

  bool null() override { return AfterValue(); }
  bool boolean(bool) override { return AfterValue(); }
  bool number_integer(number_integer_t) override { return AfterValue(); }
  bool number_unsigned(number_unsigned_t) override { return AfterValue(); }
  bool number_float(number_float_t, const string_t &) override { return AfterValue(); }
  bool string(string_t &) override { return AfterValue(); }
  bool binary(binary_t &) override { return AfterValue(); }

  bool start_object(std::size_t) override {
    frames_.push_back(Frame{false, 0, {}, {}});
    return true;
  }
  bool key(string_t &key) override {
    Frame &frame = frames_.back();
    if (!frame.keys.insert(key).second) {
      duplicate.emplace(CurrentPath(), key);
      return false;
    }
    frame.current_key = key;
    return true;
  }
  bool end_object() override { return EndContainer(); }
  bool start_array(std::size_t) override {
    frames_.push_back(Frame{true, 0, {}, {}});
    return true;
  }
  bool end_array() override { return EndContainer(); }

  bool parse_error(std::size_t position, const std::string &last_token,
                   const nlohmann::detail::exception &error) override {
    // Positions count bytes read; a syntax error blames the last byte read,
    // a number overflow (id 406) the whole number token that was just read.
    size_t offset = position > 0 ? position - 1 : 0;
    if (error.id == 406) offset = position >= last_token.size() ? position - last_token.size() : 0;
    syntax_error.emplace(offset, SyntaxDetail(error.what()));
    return false;
  }

 private:
  struct Frame {
    bool is_array;
    size_t index;                // arrays: the element being read
    std::set<std::string> keys;  // objects: keys seen so far
    std::string current_key;     // objects: the key being read
  };

  // The path of the innermost open container. Built only on demand: building
  // it per container would be quadratic in the nesting depth.
  std::string CurrentPath() const {
    std::string path;
    for (size_t i = 0; i + 1 < frames_.size(); ++i) {
      path = frames_[i].is_array ? ElementPath(path, frames_[i].index)
                                 : ChildPath(path, frames_[i].current_key);
    }
    return path;
  }
  bool AfterValue() {
    if (!frames_.empty() && frames_.back().is_array) ++frames_.back().index;
    return true;
  }
  bool EndContainer() {
    frames_.pop_back();
    return AfterValue();
  }

  std::vector<Frame> frames_;
};

std::string DescribeObject(const std::string &path) {
  return path.empty() ? "at top level" : "in " + path;
}

}  // namespace

TextPosition PositionOf(std::string_view text, size_t byte_offset) {
  byte_offset = std::min(byte_offset, text.size());
  TextPosition position;
  for (size_t i = 0; i < byte_offset; ++i) {
    if (text[i] == '\n') {
      ++position.line;
      position.column = 1;
    } else {
      ++position.column;
    }
  }
  return position;
}

Result<Json> ParseStrictJson(std::string_view text) {
  if (IsBlank(text)) return ConfigError("the config is empty; expected a JSON object");
  StrictChecker checker;
  const bool valid = Json::sax_parse(text.begin(), text.end(), &checker,
                                     nlohmann::detail::input_format_t::json, /*strict=*/true);
  if (checker.syntax_error) {
    const auto &[offset, detail] = *checker.syntax_error;
    const TextPosition at = PositionOf(text, offset);
    return ConfigError("malformed JSON at line " + std::to_string(at.line) + ", column " +
                       std::to_string(at.column) + " (near `" + SnippetAround(text, offset) +
                       "`): " + detail);
  }
  if (checker.duplicate) {
    const auto &[path, key] = *checker.duplicate;
    return ConfigError("duplicate key " + Shorten(Json(key)) + " " + DescribeObject(path) +
                       "; DeepSpeed rejects duplicate keys (with JSON's rules the later value "
                       "would silently win)");
  }
  if (!valid) return InternalError("JSON validation stopped without a reason");
  return Json::parse(text.begin(), text.end());
}

std::string Shorten(const Json &value) {
  std::string out;
  Render(value, 0, &out);
  return TruncateUtf8(std::move(out), kMaxShown);
}

std::string ChildPath(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : std::string(parent) + "." + std::string(key);
}

std::string ElementPath(std::string_view parent, size_t index) {
  return std::string(parent) + "[" + std::to_string(index) + "]";
}

Status Mismatch(std::string_view path, std::string_view expected, const Json &found) {
  const std::string where = path.empty() ? "the config" : std::string(path);
  return ConfigError(where + ": expected " + std::string(expected) + ", found " + Shorten(found));
}

bool IsAuto(const Json &value) {
  return value.is_string() && value.get_ref<const std::string &>() == "auto";
}

std::optional<int64_t> AsInt64(const Json &value) {
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<int64_t>();
  if (value.is_number_unsigned()) {
    const auto n = value.get<uint64_t>();
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(n);
  }
  if (value.is_number_float()) {
    // DeepSpeed configs write sizes as 5e8; accept them when integral.
    const double x = value.get<double>();
    constexpr double kTwoTo63 = 9223372036854775808.0;
    if (!std::isfinite(x) || std::floor(x) != x || x < -kTwoTo63 || x >= kTwoTo63) {
      return std::nullopt;
    }
    return static_cast<int64_t>(x);
  }
  return std::nullopt;
}

std::optional<uint64_t> AsUint64(const Json &value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) {
    const auto n = value.get<int64_t>();
    return n < 0 ? std::nullopt : std::optional<uint64_t>(static_cast<uint64_t>(n));
  }
  if (value.is_number_float()) {
    const double x = value.get<double>();
    constexpr double kTwoTo64 = 18446744073709551616.0;
    if (!std::isfinite(x) || std::floor(x) != x || x < 0 || x >= kTwoTo64) return std::nullopt;
    return static_cast<uint64_t>(x);
  }
  return std::nullopt;
}

std::optional<double> AsDouble(const Json &value) {
  if (!value.is_number()) return std::nullopt;
  const double x = value.get<double>();
  if (!std::isfinite(x)) return std::nullopt;
  return x;
}

bool Range::Contains(double x) const {
  const bool above = min_open ? x > min : x >= min;
  const bool below = max_open ? x < max : x <= max;
  return above && below;
}

Range AtLeast(double min) {
  return Range{min, std::numeric_limits<double>::infinity()};
}
Range GreaterThan(double min) {
  return Range{min, std::numeric_limits<double>::infinity(), /*min_open=*/true};
}
Range Between(double min, double max) {
  return Range{min, max};
}

// ---------------------------------------------------------------------------
// ObjectReader

std::vector<std::string> ObjectReader::UnknownKeys() const {
  std::vector<std::string> keys;
  for (auto it = object_.begin(); it != object_.end(); ++it)
    if (FindConfigKey(section_, it.key()) == nullptr) keys.push_back(it.key());
  return keys;
}

Status ObjectReader::CheckKeys() const {
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (FindConfigKey(section_, it.key()) == nullptr) {
      return ConfigError(UnknownKeyMessage(section_, path_, it.key()));
    }
  }
  return Status::Ok();
}

const Json *ObjectReader::Find(std::string_view key) const {
  const auto it = object_.find(std::string(key));
  return it == object_.end() ? nullptr : &*it;
}

Result<const ConfigKeyInfo *> ObjectReader::Row(std::string_view key) const {
  const ConfigKeyInfo *row = FindConfigKey(section_, key);
  if (row == nullptr || row->key == "*") {
    return InternalError("config key " + PathOf(key) + " (section \"" + std::string(section_) +
                         "\") is read but missing from the key table");
  }
  return row;
}

Status ObjectReader::MismatchAt(std::string_view key, const Json &found) const {
  Result<const ConfigKeyInfo *> row = Row(key);
  if (!row.ok()) return row.status();
  return Mismatch(PathOf(key), row.value()->accepts, found);
}

Status ObjectReader::ReadBool(std::string_view key, bool *out, std::optional<bool> if_auto) const {
  Result<const ConfigKeyInfo *> row = Row(key);
  if (!row.ok()) return row.status();
  const Json *value = Find(key);
  if (value == nullptr) return Status::Ok();
  if (if_auto && IsAuto(*value)) {
    *out = *if_auto;
  } else if (value->is_boolean()) {
    *out = value->get<bool>();
  } else {
    return MismatchAt(key, *value);
  }
  return Status::Ok();
}

Status ObjectReader::ReadInt(std::string_view key, int64_t *out, int64_t min, int64_t max,
                             std::optional<int64_t> if_auto) const {
  Result<const ConfigKeyInfo *> row = Row(key);
  if (!row.ok()) return row.status();
  const Json *value = Find(key);
  if (value == nullptr) return Status::Ok();
  if (if_auto && IsAuto(*value)) {
    *out = *if_auto;
    return Status::Ok();
  }
  const std::optional<int64_t> n = AsInt64(*value);
  if (!n || *n < min || *n > max) return MismatchAt(key, *value);
  *out = *n;
  return Status::Ok();
}

Status ObjectReader::ReadInt(std::string_view key, int *out, int min, int max) const {
  int64_t wide = *out;
  DST_RETURN_IF_ERROR(ReadInt(key, &wide, min, max));
  *out = static_cast<int>(wide);  // in [min, max], so it fits
  return Status::Ok();
}

Status ObjectReader::ReadUint(std::string_view key, uint64_t *out) const {
  Result<const ConfigKeyInfo *> row = Row(key);
  if (!row.ok()) return row.status();
  const Json *value = Find(key);
  if (value == nullptr) return Status::Ok();
  const std::optional<uint64_t> n = AsUint64(*value);
  if (!n) return MismatchAt(key, *value);
  *out = *n;
  return Status::Ok();
}

Status ObjectReader::ReadNumber(std::string_view key, double *out, Range range,
                                std::optional<double> if_auto) const {
  Result<const ConfigKeyInfo *> row = Row(key);
  if (!row.ok()) return row.status();
  const Json *value = Find(key);
  if (value == nullptr) return Status::Ok();
  if (if_auto && IsAuto(*value)) {
    *out = *if_auto;
    return Status::Ok();
  }
  const std::optional<double> x = AsDouble(*value);
  if (!x || !range.Contains(*x)) return MismatchAt(key, *value);
  *out = *x;
  return Status::Ok();
}

Status ObjectReader::ReadString(std::string_view key, std::string *out, bool nullable) const {
  Result<const ConfigKeyInfo *> row = Row(key);
  if (!row.ok()) return row.status();
  const Json *value = Find(key);
  if (value == nullptr || (nullable && value->is_null())) return Status::Ok();
  if (!value->is_string()) return MismatchAt(key, *value);
  *out = value->get<std::string>();
  return Status::Ok();
}

Status ObjectReader::ReadStringList(std::string_view key) const {
  Result<const ConfigKeyInfo *> row = Row(key);
  if (!row.ok()) return row.status();
  const Json *value = Find(key);
  if (value == nullptr) return Status::Ok();
  if (!value->is_array()) return MismatchAt(key, *value);
  for (size_t i = 0; i < value->size(); ++i) {
    if (!(*value)[i].is_string()) {
      return Mismatch(ElementPath(PathOf(key), i), "a string", (*value)[i]);
    }
  }
  return Status::Ok();
}

Status ObjectReader::ReadChoice(std::string_view key,
                                std::initializer_list<std::string_view> choices,
                                std::string *out) const {
  Result<const ConfigKeyInfo *> row = Row(key);
  if (!row.ok()) return row.status();
  const Json *value = Find(key);
  if (value == nullptr) return Status::Ok();
  if (value->is_string()) {
    const auto &text = value->get_ref<const std::string &>();
    for (std::string_view choice : choices) {
      const bool same =
          std::equal(text.begin(), text.end(), choice.begin(), choice.end(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) ==
                   std::tolower(static_cast<unsigned char>(b));
          });
      if (same) {
        *out = std::string(choice);
        return Status::Ok();
      }
    }
  }
  return MismatchAt(key, *value);
}

Result<ObjectReader> ObjectReader::Child(std::string_view key, std::string_view section) const {
  static const Json kEmptyObject = Json::object();
  Result<const ConfigKeyInfo *> row = Row(key);
  if (!row.ok()) return row.status();
  const Json *value = Find(key);
  if (value == nullptr) return ObjectReader(kEmptyObject, PathOf(key), section);
  if (!value->is_object()) return MismatchAt(key, *value);
  return ObjectReader(*value, PathOf(key), section);
}

}  // namespace dst::config_internal
