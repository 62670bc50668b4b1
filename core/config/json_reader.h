// Internal to core/config: strict JSON parsing with positions, and a reader
// that walks one JSON object of the config, checks its keys against the key
// table and converts values with errors that name path, expectation and
// finding. Nothing here throws.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/common/status.h"
#include "core/config/config_keys.h"

namespace dst::config_internal {

// Insertion-ordered, so errors and the resolved config follow the file.
using Json = nlohmann::ordered_json;

// Parses RFC 8259 JSON. Syntax errors (and numbers too large for a double)
// report line and column; duplicate keys are errors naming their path, as in
// DeepSpeed, because otherwise the later value silently wins.
Result<Json> ParseStrictJson(std::string_view text);

// 1-based line and column of a byte offset.
struct TextPosition {
  size_t line = 1;
  size_t column = 1;
};
TextPosition PositionOf(std::string_view text, size_t byte_offset);

// A JSON value rendered for a message: at most a few dozen characters.
std::string Shorten(const Json &value);

std::string ChildPath(std::string_view parent, std::string_view key);
std::string ElementPath(std::string_view parent, size_t index);

// "<path>: expected <expected>, found <value>" as a kConfig error.
Status Mismatch(std::string_view path, std::string_view expected, const Json &found);

bool IsAuto(const Json &value);
// Integral JSON numbers, including floats with no fraction such as 5e8.
std::optional<int64_t> AsInt64(const Json &value);
std::optional<uint64_t> AsUint64(const Json &value);
std::optional<double> AsDouble(const Json &value);

// An interval of doubles, each end open or closed.
struct Range {
  double min;
  double max;
  bool min_open = false;
  bool max_open = false;
  bool Contains(double x) const;
};
Range AtLeast(double min);
Range GreaterThan(double min);
Range Between(double min, double max);  // closed

// Key-table lookup (config_keys.cc). Returns the "*" row when the section
// admits any key, nullptr when the key is not recognised.
const ConfigKeyInfo *FindConfigKey(std::string_view section, std::string_view key);
// The entry of `names` nearest to a mistyped `typed`, or "" if none is close.
std::string_view NearestName(std::string_view typed, std::span<const std::string_view> names);
// `unknown key "k" in <path>; did you mean "..."?` and its variants.
std::string UnknownKeyMessage(std::string_view section, std::string_view path,
                              std::string_view key);

// One JSON object of the config: where it is (`path`, for messages) and which
// key-table section lists what may appear in it. Absent keys leave outputs
// untouched, so callers preset defaults.
class ObjectReader {
 public:
  ObjectReader(const Json &object, std::string path, std::string_view section)
      : object_(object), path_(std::move(path)), section_(section) {}

  const std::string &path() const { return path_; }

  // Every key must be in the table; otherwise an error suggesting the nearest.
  Status CheckKeys() const;
  // The keys the table does not know, in the object's order.
  std::vector<std::string> UnknownKeys() const;

  const Json *Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  std::string PathOf(std::string_view key) const { return ChildPath(path_, key); }
  // Mismatch at `key` with the table's "accepts" text as the expectation.
  Status MismatchAt(std::string_view key, const Json &found) const;

  // `if_auto`: the value "auto" stands for; without it "auto" is an error.
  Status ReadBool(std::string_view key, bool *out,
                  std::optional<bool> if_auto = std::nullopt) const;
  Status ReadInt(std::string_view key, int64_t *out, int64_t min, int64_t max,
                 std::optional<int64_t> if_auto = std::nullopt) const;
  Status ReadInt(std::string_view key, int *out, int min, int max) const;
  Status ReadUint(std::string_view key, uint64_t *out) const;
  Status ReadNumber(std::string_view key, double *out, Range range,
                    std::optional<double> if_auto = std::nullopt) const;
  // `nullable`: JSON null is accepted and leaves *out untouched.
  Status ReadString(std::string_view key, std::string *out, bool nullable = false) const;
  Status ReadStringList(std::string_view key) const;
  // Matches case-insensitively and stores the spelling from `choices`.
  Status ReadChoice(std::string_view key, std::initializer_list<std::string_view> choices,
                    std::string *out) const;

  // The object at `key` (an error if it is not an object); an empty object
  // when absent, so that reading it yields the defaults.
  Result<ObjectReader> Child(std::string_view key, std::string_view section) const;

 private:
  // The table row of `key`. A key read by code but missing from the table is
  // a bug in dstrain, reported as kInternal even when the file lacks the key.
  Result<const ConfigKeyInfo *> Row(std::string_view key) const;

  const Json &object_;
  std::string path_;
  std::string_view section_;
};

}  // namespace dst::config_internal
