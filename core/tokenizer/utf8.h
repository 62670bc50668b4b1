// UTF-8 text as the tokenizers read it.
#pragma once

#include <string>
#include <string_view>

namespace dst {

// `text` with each maximal invalid UTF-8 subpart replaced by U+FFFD (what
// Python's bytes.decode(errors="replace") and JavaScript's TextDecoder give);
// valid text unchanged.
std::string ValidUtf8(std::string_view text);

}  // namespace dst
