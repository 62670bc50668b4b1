// Safetensors reader and writer. The reader treats the file as untrusted: every
// length, offset and shape is checked before it is used, so a truncated or
// corrupt file becomes a kCheckpoint error that names the file and the tensor.
#include "core/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>

namespace dst {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian bytes; big-endian hosts need byte swapping");

namespace {

// The Rust reference implementation refuses headers above 100 MB; so do we, which
// also bounds the memory a corrupt length field can make us allocate.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

constexpr char kMetadataKey[] = "__metadata__";

std::optional<TensorDType> ParseDType(std::string_view name) {
  if (name == "F32") return TensorDType::kF32;
  if (name == "F16") return TensorDType::kF16;
  if (name == "BF16") return TensorDType::kBF16;
  if (name == "I32") return TensorDType::kI32;
  if (name == "I64") return TensorDType::kI64;
  if (name == "U8") return TensorDType::kU8;
  return std::nullopt;
}

// numel(shape) * elem_size without overflow; nullopt on a negative dim or overflow.
std::optional<uint64_t> CheckedBytes(const std::vector<int64_t> &shape, size_t elem_size) {
  uint64_t n = elem_size;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    uint64_t ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > std::numeric_limits<uint64_t>::max() / ud) return std::nullopt;
    n *= ud;
  }
  return n;
}

std::string Errno() {
  return std::strerror(errno);
}

// Closes a file descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  int get() const { return fd_; }
  // Closes now and reports the result (close can surface delayed write errors).
  int Close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

bool WriteAll(int fd, const void *data, size_t size) {
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly `size` bytes at `offset`; false with errno set (0 for EOF).
bool PreadAll(int fd, void *data, size_t size, uint64_t offset) {
  char *p = static_cast<char *>(data);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = 0;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

std::string ShapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Reads a non-negative integer that fits in uint64 from a JSON value.
std::optional<uint64_t> AsU64(const nlohmann::json &v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i >= 0) return static_cast<uint64_t>(i);
  }
  return std::nullopt;
}

// A validated header: the tensors in data order, the metadata, where the
// data section starts.
struct ParsedHeader {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;
};

}  // namespace

size_t DTypeSize(TensorDType dtype) {
  switch (dtype) {
    case TensorDType::kF32:
      return 4;
    case TensorDType::kF16:
      return 2;
    case TensorDType::kBF16:
      return 2;
    case TensorDType::kI32:
      return 4;
    case TensorDType::kI64:
      return 8;
    case TensorDType::kU8:
      return 1;
  }
  return 0;
}

const char *DTypeName(TensorDType dtype) {
  switch (dtype) {
    case TensorDType::kF32:
      return "F32";
    case TensorDType::kF16:
      return "F16";
    case TensorDType::kBF16:
      return "BF16";
    case TensorDType::kI32:
      return "I32";
    case TensorDType::kI64:
      return "I64";
    case TensorDType::kU8:
      return "U8";
  }
  return "?";
}

int64_t LoadedTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status WriteSafetensors(const std::string &path, const std::vector<TensorRef> &tensors,
                        const std::map<std::string, std::string> &metadata, Checksum64 *sum) {
  const std::string where = "writing safetensors '" + path + "'";
  // ordered_json keeps the tensors in the order given.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto &[k, v] : metadata) meta[k] = v;
    header[kMetadataKey] = std::move(meta);
  }
  std::set<std::string> seen;
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  uint64_t offset = 0;
  for (const TensorRef &t : tensors) {
    const std::string what = where + ": tensor '" + t.name + "'";
    if (t.name.empty()) return InvalidArgument(where + ": a tensor has an empty name");
    if (t.name == kMetadataKey) {
      return InvalidArgument(what + ": the name is reserved for the metadata map");
    }
    if (!seen.insert(t.name).second) {
      return InvalidArgument(what + ": duplicate tensor name; each name may appear once");
    }
    std::optional<uint64_t> bytes = CheckedBytes(t.shape, DTypeSize(t.dtype));
    if (!bytes) {
      return InvalidArgument(what + ": bad shape " + ShapeString(t.shape) +
                             " (dimensions must be >= 0 and the size must fit in 64 bits)");
    }
    if (t.data == nullptr && *bytes > 0) {
      return InvalidArgument(what + ": data pointer is null");
    }
    if (offset > std::numeric_limits<uint64_t>::max() - *bytes) {
      return InvalidArgument(what + ": total size overflows 64 bits");
    }
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
    sizes.push_back(*bytes);
  }
  std::string text = header.dump();
  // Pad with spaces so that the data starts at an 8-byte aligned file offset.
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  uint64_t n = text.size();
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(n >> (8 * i));

  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return IoError(where + ": cannot open for writing: " + Errno());
  if (!WriteAll(fd.get(), len_bytes, sizeof len_bytes) ||
      !WriteAll(fd.get(), text.data(), text.size())) {
    return IoError(where + ": write failed: " + Errno());
  }
  if (sum) {
    sum->Update(len_bytes, sizeof len_bytes);
    sum->Update(text.data(), text.size());
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] == 0) continue;
    if (!WriteAll(fd.get(), tensors[i].data, sizes[i])) {
      return IoError(where + ": writing tensor '" + tensors[i].name + "' failed: " + Errno());
    }
    if (sum) sum->Update(tensors[i].data, sizes[i]);
  }
  if (::fsync(fd.get()) != 0) return IoError(where + ": fsync failed: " + Errno());
  if (fd.Close() != 0) return IoError(where + ": close failed: " + Errno());
  return Status::Ok();
}

// The header of the open file `fd`, validated: every length, offset and
// shape checked, the tensors tiling the data section exactly. `sum`, when
// given, is fed the header's bytes.
Result<ParsedHeader> ParseHeader(int fd, const std::string &where, Checksum64 *sum) {
  auto corrupt = [&](const std::string &msg) {
    return CheckpointError(where + ": " + msg + " (the file is corrupt or not a safetensors file)");
  };
  auto bad_tensor = [&](const std::string &name, const std::string &msg) {
    return CheckpointError(where + ": tensor '" + name + "': " + msg +
                           " (the file is corrupt or not a safetensors file)");
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) return IoError(where + ": stat failed: " + Errno());
  if (!S_ISREG(st.st_mode)) return IoError(where + ": not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);

  if (file_size < 8) {
    return corrupt("file is " + std::to_string(file_size) +
                   " bytes, shorter than the 8-byte header length");
  }
  unsigned char len_bytes[8];
  if (!PreadAll(fd, len_bytes, 8, 0)) {
    return IoError(where + ": read failed: " + (errno ? Errno() : "unexpected end of file"));
  }
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
  if (header_len > file_size - 8) {
    return corrupt("header length " + std::to_string(header_len) + " exceeds the file size " +
                   std::to_string(file_size));
  }
  if (header_len > kMaxHeaderBytes) {
    return corrupt("header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  }
  if (header_len < 2) return corrupt("header is too short to be a JSON object");
  std::string text(header_len, '\0');
  if (!PreadAll(fd, text.data(), text.size(), 8)) {
    return IoError(where + ": read failed: " + (errno ? Errno() : "unexpected end of file"));
  }
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  if (sum) {
    sum->Update(len_bytes, 8);
    sum->Update(text.data(), text.size());
  }

  // Parse without exceptions; the callback catches duplicate top-level keys,
  // which nlohmann would otherwise silently collapse.
  std::set<std::string> keys;
  std::string duplicate;
  nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t event,
                                             nlohmann::json &parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string()) {
      const std::string &k = parsed.get_ref<const std::string &>();
      if (!keys.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  nlohmann::json header = nlohmann::json::parse(text, cb, /*allow_exceptions=*/false);
  if (header.is_discarded()) return corrupt("header is not valid JSON");
  if (!header.is_object()) return corrupt("header is not a JSON object");
  if (!duplicate.empty()) return bad_tensor(duplicate, "name appears more than once in the header");

  ParsedHeader out;
  std::vector<SafetensorsEntry> &entries = out.entries;
  for (const auto &[name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) return corrupt("\"__metadata__\" is not an object");
      for (const auto &[k, v] : value.items()) {
        if (!v.is_string()) {
          return corrupt("\"__metadata__\" entry '" + k + "' is not a string");
        }
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!value.is_object()) return bad_tensor(name, "entry is not an object");
    for (const auto &[field, unused] : value.items()) {
      (void)unused;
      if (field != "dtype" && field != "shape" && field != "data_offsets") {
        return bad_tensor(name, "unknown field '" + field + "'");
      }
    }
    SafetensorsEntry e;
    e.name = name;
    auto dt = value.find("dtype");
    if (dt == value.end() || !dt->is_string()) return bad_tensor(name, "missing string 'dtype'");
    std::optional<TensorDType> dtype = ParseDType(dt->get<std::string>());
    if (!dtype) {
      return bad_tensor(name, "unsupported dtype '" + dt->get<std::string>() +
                                  "' (expected F32, F16, BF16, I32, I64 or U8)");
    }
    e.dtype = *dtype;
    auto sh = value.find("shape");
    if (sh == value.end() || !sh->is_array()) return bad_tensor(name, "missing array 'shape'");
    for (const auto &d : *sh) {
      std::optional<uint64_t> ud = AsU64(d);
      if (!ud || *ud > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return bad_tensor(name, "shape " + sh->dump() + " has a non-integer or negative dimension");
      }
      e.shape.push_back(static_cast<int64_t>(*ud));
    }
    auto off = value.find("data_offsets");
    if (off == value.end() || !off->is_array() || off->size() != 2) {
      return bad_tensor(name, "missing 'data_offsets' [begin, end]");
    }
    std::optional<uint64_t> b = AsU64((*off)[0]), en = AsU64((*off)[1]);
    if (!b || !en)
      return bad_tensor(name, "data_offsets " + off->dump() + " are not integers >= 0");
    if (*b > *en) return bad_tensor(name, "data_offsets " + off->dump() + " have begin > end");
    if (*en > data_size) {
      return bad_tensor(name, "data_offsets " + off->dump() + " run past the end of the data (" +
                                  std::to_string(data_size) + " bytes; the file may be truncated)");
    }
    e.begin = *b;
    e.end = *en;
    std::optional<uint64_t> bytes = CheckedBytes(e.shape, DTypeSize(e.dtype));
    if (!bytes) return bad_tensor(name, "shape " + ShapeString(e.shape) + " overflows");
    if (*bytes != e.end - e.begin) {
      return bad_tensor(name, "shape " + ShapeString(e.shape) + " of " + DTypeName(e.dtype) +
                                  " needs " + std::to_string(*bytes) + " bytes but data_offsets " +
                                  off->dump() + " hold " + std::to_string(e.end - e.begin));
    }
    entries.push_back(std::move(e));
  }

  // The tensors must tile the data section exactly: no gap, no overlap, no tail.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const SafetensorsEntry &a, const SafetensorsEntry &b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  uint64_t cursor = 0;
  for (const SafetensorsEntry *e = entries.data(); e != entries.data() + entries.size(); ++e) {
    if (e->begin < cursor) {
      return bad_tensor(e->name, "data_offsets [" + std::to_string(e->begin) + ", " +
                                     std::to_string(e->end) + "] overlap the previous tensor");
    }
    if (e->begin > cursor) {
      return bad_tensor(e->name, "data_offsets [" + std::to_string(e->begin) + ", " +
                                     std::to_string(e->end) + "] leave a gap after byte " +
                                     std::to_string(cursor));
    }
    cursor = e->end;
  }
  if (cursor != data_size) {
    return corrupt("tensors cover " + std::to_string(cursor) + " bytes of data but the file has " +
                   std::to_string(data_size) + " after the header");
  }

  out.data_start = data_start;
  return out;
}

Result<SafetensorsFile> ReadSafetensors(const std::string &path, Checksum64 *sum) {
  const std::string where = "safetensors '" + path + "'";
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return IoError(where + ": cannot open: " + Errno());
  Result<ParsedHeader> header = ParseHeader(fd.get(), where, sum);
  DST_RETURN_IF_ERROR(header.status());
  SafetensorsFile out;
  out.metadata = std::move(header.value().metadata);
  for (const SafetensorsEntry &e : header.value().entries) {
    LoadedTensor t;
    t.dtype = e.dtype;
    t.shape = e.shape;
    t.bytes.resize(e.end - e.begin);
    if (!t.bytes.empty() &&
        !PreadAll(fd.get(), t.bytes.data(), t.bytes.size(), header.value().data_start + e.begin)) {
      if (errno == 0)
        return CheckpointError(where + ": tensor '" + e.name +
                               "': unexpected end of file (the file is corrupt or not a "
                               "safetensors file)");
      return IoError(where + ": reading tensor '" + e.name + "' failed: " + Errno());
    }
    if (sum) sum->Update(t.bytes.data(), t.bytes.size());
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<SafetensorsReader> SafetensorsReader::Open(const std::string &path) {
  const std::string where = "safetensors '" + path + "'";
  SafetensorsReader r;
  r.path_ = path;
  r.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (r.fd_ < 0) return IoError(where + ": cannot open: " + Errno());
  Result<ParsedHeader> header = ParseHeader(r.fd_, where, nullptr);
  DST_RETURN_IF_ERROR(header.status());
  r.entries_ = std::move(header.value().entries);
  r.metadata_ = std::move(header.value().metadata);
  r.data_start_ = header.value().data_start;
  for (size_t i = 0; i < r.entries_.size(); ++i) r.index_.emplace(r.entries_[i].name, i);
  return r;
}

SafetensorsReader::SafetensorsReader(SafetensorsReader &&other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      entries_(std::move(other.entries_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)),
      data_start_(other.data_start_) {}

SafetensorsReader &SafetensorsReader::operator=(SafetensorsReader &&other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    entries_ = std::move(other.entries_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
    data_start_ = other.data_start_;
  }
  return *this;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry *SafetensorsReader::Find(const std::string &name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Status SafetensorsReader::Read(const SafetensorsEntry &e, uint64_t offset, size_t size,
                               void *out) const {
  const std::string where = "safetensors '" + path_ + "'";
  if (offset > e.end - e.begin || size > e.end - e.begin - offset)
    return InternalError(where + ": tensor '" + e.name + "': bytes [" + std::to_string(offset) +
                         ", " + std::to_string(offset + size) + ") asked of " +
                         std::to_string(e.end - e.begin));
  if (size > 0 && !PreadAll(fd_, out, size, data_start_ + e.begin + offset)) {
    if (errno == 0)
      return CheckpointError(where + ": tensor '" + e.name +
                             "': unexpected end of file (the file was truncated after it was "
                             "opened)");
    return IoError(where + ": reading tensor '" + e.name + "' failed: " + Errno());
  }
  return Status::Ok();
}

}  // namespace dst
