// Reading a model spec's JSON: the helpers every family's parser uses, each
// error naming the JSON path, what was expected and what was found.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/common/status.h"

namespace dst::spec_json {

using Json = nlohmann::json;

std::string Shorten(const Json &value);
Status Expected(const std::string &path, const std::string &what, const Json &found);
// Every key of `object` is in `known`; else names the first unknown one and the known ones.
Status CheckKeys(const Json &object, const std::string &path, const std::set<std::string> &known);
// object[key] as an integer in [lo, hi] into *out; a missing key leaves *out
// as it is, or is an error when `required`.
Status ReadInt(const Json &object, const std::string &path, const char *key, int64_t lo, int64_t hi,
               int64_t *out, bool required);
// object[key] as a number in (lo, hi] into *out (a missing key leaves it).
Status ReadNumber(const Json &object, const std::string &path, const char *key, double lo,
                  double hi, double *out);
Status ReadBool(const Json &object, const std::string &path, const char *key, bool *out);
Status ReadSeed(const Json &object, const std::string &path, uint64_t *seed);
// $.make_vocab_size_divisible_by (Megatron's name; every family takes it)
// into lm->vocab_multiple.
Status ReadVocabMultiple(const Json &object, int64_t *multiple);
// The first of `names` present (several spellings of one setting: two given
// is an error naming both); "" when none is.
Result<std::string> OneOf(const Json &object, const std::vector<std::string> &names);
// A key that must hold `value` (a feature that changes the math and is not
// built otherwise), or null / absent: else "not supported yet" naming it.
Status RequireValue(const Json &object, const std::string &path, const char *key,
                    const Json &value, const std::string &why);

}  // namespace dst::spec_json
