// The table of every ds_config.json key dstrain recognises. It is the single
// source for the unknown-key check, the "did you mean" suggestion, the
// "expected ..." half of type errors, and the generated key reference.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace dst {

struct ConfigKeyInfo {
  // The JSON path of the object the key lives in ("" = top level). Parameter
  // sets that depend on a "type" carry it after a colon:
  // "optimizer.params:SGD" is optimizer.params when optimizer.type is SGD.
  std::string_view section;
  // The key; "*" admits any key in the section (passed-through option bags).
  std::string_view key;
  // The accepted values, phrased to follow "expected " in an error message.
  std::string_view accepts;
  // What dstrain does with the key, including "not supported yet".
  std::string_view doc;
};

// All recognised keys, grouped by section in the order the reference lists them.
std::span<const ConfigKeyInfo> KnownConfigKeys();

// The table rendered as Markdown, one table per section, for the docs.
std::string ConfigKeysMarkdown();

}  // namespace dst
