#include "core/model/spec_json.h"

namespace dst::spec_json {

std::string Shorten(const Json &value) {
  std::string text = value.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

Status Expected(const std::string &path, const std::string &what, const Json &found) {
  return ConfigError("model spec: " + path + ": expected " + what + ", found " + Shorten(found));
}

Status CheckKeys(const Json &object, const std::string &path, const std::set<std::string> &known) {
  for (const auto &[key, value] : object.items()) {
    if (known.count(key)) continue;
    std::string list;
    for (const auto &k : known) list += (list.empty() ? "" : ", ") + k;
    return ConfigError("model spec: unknown key \"" + key + "\" in " + path +
                       "; known keys: " + list);
  }
  return Status::Ok();
}

Status ReadInt(const Json &object, const std::string &path, const char *key, int64_t lo, int64_t hi,
               int64_t *out, bool required) {
  const std::string where = path + "." + key;
  if (!object.contains(key)) {
    if (required) return ConfigError("model spec: missing required key " + where);
    return Status::Ok();
  }
  const Json &v = object.at(key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)))
    return Expected(where, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                    v);
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi)
    return Expected(where, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                    v);
  *out = n;
  return Status::Ok();
}

Status ReadSeed(const Json &object, const std::string &path, uint64_t *seed) {
  if (!object.contains("seed")) return Status::Ok();
  const Json &v = object.at("seed");
  if (!v.is_number_integer() ||
      (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0))
    return Expected(path + ".seed", "a non-negative integer", v);
  *seed = v.get<uint64_t>();
  return Status::Ok();
}


Status ReadNumber(const Json &object, const std::string &path, const char *key, double lo,
                  double hi, double *out) {
  if (!object.contains(key)) return Status::Ok();
  const Json &v = object.at(key);
  const std::string range = "a number in (" + Shorten(lo) + ", " + Shorten(hi) + "]";
  if (!v.is_number()) return Expected(path + "." + key, range, v);
  const double x = v.get<double>();
  if (!(x > lo && x <= hi)) return Expected(path + "." + key, range, v);
  *out = x;
  return Status::Ok();
}

Status ReadBool(const Json &object, const std::string &path, const char *key, bool *out) {
  if (!object.contains(key)) return Status::Ok();
  const Json &v = object.at(key);
  if (!v.is_boolean()) return Expected(path + "." + key, "true or false", v);
  *out = v.get<bool>();
  return Status::Ok();
}

Status ReadVocabMultiple(const Json &object, int64_t *multiple) {
  return ReadInt(object, "$", "make_vocab_size_divisible_by", 1, int64_t(1) << 20, multiple, false);
}

Result<std::string> OneOf(const Json &object, const std::vector<std::string> &names) {
  std::string found;
  for (const std::string &name : names) {
    if (!object.contains(name)) continue;
    if (!found.empty())
      return ConfigError("model spec: both $." + found + " (" + Shorten(object.at(found)) +
                         ") and $." + name + " (" + Shorten(object.at(name)) +
                         ") are given; they are two names of one setting: keep one");
    found = name;
  }
  return found;
}

Status RequireValue(const Json &object, const std::string &path, const char *key,
                    const Json &value, const std::string &why) {
  if (!object.contains(key) || object.at(key).is_null() || object.at(key) == value)
    return Status::Ok();
  return NotSupported("model spec: " + path + "." + key + " " + Shorten(object.at(key)) +
                      " is not supported yet (" + why + "); set it to " + value.dump());
}

}  // namespace dst::spec_json
