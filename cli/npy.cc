#include "npy.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>

#include "cli_error.h"

namespace dstrain_cli {

int64_t NpyArray::row_size() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

namespace {

[[noreturn]] void Bad(const std::string &path, const std::string &what) {
  UsageError("'" + path + "' is not a usable .npy array: " + what +
             " (save little-endian float32 inputs/labels or int32/int64 class ids, C order, "
             "with numpy.save)");
}

}  // namespace

NpyArray ReadNpy(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) UsageError("cannot open '" + path + "': " + std::strerror(errno));
  char magic[8] = {};
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) Bad(path, "no .npy magic");
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    in.read(reinterpret_cast<char *>(b), 2);
    header_len = b[0] | (uint32_t(b[1]) << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    in.read(reinterpret_cast<char *>(b), 4);
    header_len = b[0] | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24);
  } else {
    Bad(path, "format version " + std::to_string(major));
  }
  if (!in || header_len > (1u << 20)) Bad(path, "a truncated or oversized header");
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  if (!in) Bad(path, "a truncated header");
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    Bad(path, "no dtype in its header");
  const std::string descr = m[1];
  if (std::regex_search(header, std::regex(R"('fortran_order'\s*:\s*True)")))
    Bad(path, "Fortran order");
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    Bad(path, "no shape in its header");
  NpyArray a;
  const std::string dims = m[1];
  const std::regex number(R"(\d+)");
  std::sregex_iterator it(dims.begin(), dims.end(), number), end;
  int64_t count = 1;
  for (; it != end; ++it) {
    if (it->str().size() > 13) Bad(path, "a huge shape");  // > 2^40 (stoll would throw past 2^63)
    a.shape.push_back(std::stoll(it->str()));
    if (a.shape.back() > (int64_t(1) << 40) / std::max<int64_t>(count, 1))
      Bad(path, "a huge shape");
    count *= a.shape.back();
  }
  if (a.shape.empty()) Bad(path, "a scalar (it needs a row per sample)");
  size_t width = 0;
  if (descr == "<f4" || descr == "|f4")
    width = 4;
  else if (descr == "<i4" || descr == "<i8")
    width = descr == "<i4" ? 4 : 8;
  else
    Bad(path, "dtype '" + descr + "'");
  // The shape is checked against the bytes the file holds before anything is
  // allocated: a corrupt header must not ask for more memory than the file has.
  const std::streamoff data_start = in.tellg();
  in.seekg(0, std::ios::end);
  const std::streamoff file_end = in.tellg();
  in.seekg(data_start);
  const uint64_t want = uint64_t(count) * width;
  const uint64_t have = file_end > data_start ? uint64_t(file_end - data_start) : 0;
  if (!in || want > have)
    Bad(path, "fewer bytes than its shape says (" + std::to_string(want) + " bytes for the shape, " +
                  std::to_string(have) + " in the file)");
  std::vector<char> raw(want);
  in.read(raw.data(), std::streamsize(raw.size()));
  if (!in) Bad(path, "fewer bytes than its shape says");
  FillArray(&a, raw, width == 4 && descr != "<i4", width);
  return a;
}

void FillArray(NpyArray *a, const std::vector<char> &raw, bool is_float, size_t width) {
  const size_t count = raw.size() / width;
  if (is_float) {
    a->f32.resize(count);
    if (count > 0) std::memcpy(a->f32.data(), raw.data(), count * 4);
    return;
  }
  a->ints.resize(count);
  for (size_t i = 0; i < count; ++i) {
    if (width == 4) {
      int32_t v;
      std::memcpy(&v, raw.data() + i * 4, 4);
      a->ints[i] = v;
    } else {
      std::memcpy(&a->ints[i], raw.data() + i * 8, 8);
    }
  }
}

}  // namespace dstrain_cli
