#include "core/tokenizer/utf8.h"

#include <unicode/utf8.h>

namespace dst {

std::string ValidUtf8(std::string_view text) {
  const auto *s = reinterpret_cast<const uint8_t *>(text.data());
  const int32_t n = int32_t(text.size());
  std::string out;
  out.reserve(text.size());
  int32_t i = 0;
  while (i < n) {
    const int32_t start = i;
    UChar32 c;
    // ICU's U8_NEXT consumes a maximal subpart of an ill-formed sequence
    // (the W3C / WHATWG practice) and gives c < 0 for it.
    U8_NEXT(s, i, n, c);
    if (c < 0)
      out += "\xEF\xBF\xBD";
    else
      out.append(text.data() + start, size_t(i - start));
  }
  return out;
}

}  // namespace dst
