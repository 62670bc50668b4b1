#include "safetensors_input.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_error.h"

namespace dstrain_cli {

namespace {

constexpr uint64_t kMaxHeader = uint64_t(16) << 20;  // bytes of JSON

[[noreturn]] void Bad(const std::string &path, const std::string &what) {
  UsageError("'" + path + "' is not a usable safetensors file of inputs and labels: " + what +
             " (expected tensors \"inputs\" F32 [samples, input_dim] and \"labels\" F32 "
             "[samples, outputs] or I32/I64 [samples], e.g. safetensors.numpy.save_file)");
}

// One tensor of the header, its bytes read from the file into an NpyArray.
NpyArray ReadTensor(std::ifstream &in, const std::string &path, const nlohmann::json &header,
                    const char *name, uint64_t data_start, uint64_t file_size) {
  if (!header.contains(name) || !header[name].is_object())
    Bad(path, std::string("no tensor \"") + name + "\"");
  const nlohmann::json &t = header[name];
  if (!t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") ||
      !t["shape"].is_array() || !t.contains("data_offsets") || !t["data_offsets"].is_array() ||
      t["data_offsets"].size() != 2)
    Bad(path, std::string("tensor \"") + name + "\" lacks dtype, shape or data_offsets");
  const std::string dtype = t["dtype"].get<std::string>();
  size_t width = 0;
  if (dtype == "F32" || dtype == "I32")
    width = 4;
  else if (dtype == "I64")
    width = 8;
  else
    Bad(path, std::string("tensor \"") + name + "\" is " + dtype);
  NpyArray a;
  uint64_t count = 1;
  for (const nlohmann::json &d : t["shape"]) {
    if (!d.is_number_unsigned() ||
        d.get<uint64_t>() > (uint64_t(1) << 40) / std::max<uint64_t>(count, 1))
      Bad(path, std::string("tensor \"") + name + "\" has a bad shape");
    a.shape.push_back(int64_t(d.get<uint64_t>()));
    count *= d.get<uint64_t>();
  }
  if (a.shape.empty()) Bad(path, std::string("tensor \"") + name + "\" is a scalar");
  const uint64_t begin = t["data_offsets"][0].get<uint64_t>();
  const uint64_t end = t["data_offsets"][1].get<uint64_t>();
  if (end < begin || end - begin != count * width || data_start + end > file_size)
    Bad(path, std::string("tensor \"") + name + "\"'s bytes [" + std::to_string(begin) + ", " +
                  std::to_string(end) + ") do not match its shape or lie past the end");
  std::vector<char> raw(size_t(count * width));
  in.seekg(std::streamoff(data_start + begin));
  in.read(raw.data(), std::streamsize(raw.size()));
  if (!in) Bad(path, std::string("reading tensor \"") + name + "\" failed");
  FillArray(&a, raw, dtype == "F32", width);
  return a;
}

}  // namespace

InputLabelArrays ReadSafetensorsPair(const std::string &path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) UsageError("cannot open '" + path + "': " + std::strerror(errno));
  const uint64_t file_size = uint64_t(in.tellg());
  in.seekg(0);
  unsigned char len[8] = {};
  in.read(reinterpret_cast<char *>(len), 8);
  if (!in) Bad(path, "shorter than its 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len[i];
  if (header_len > kMaxHeader || 8 + header_len > file_size)
    Bad(path, "a header of " + std::to_string(header_len) + " bytes");
  std::string text(size_t(header_len), '\0');
  in.read(text.data(), std::streamsize(header_len));
  const nlohmann::json header = nlohmann::json::parse(text, nullptr, false);
  if (!in || header.is_discarded() || !header.is_object()) Bad(path, "its header is not JSON");
  InputLabelArrays out;
  out.inputs = ReadTensor(in, path, header, "inputs", 8 + header_len, file_size);
  out.labels = ReadTensor(in, path, header, "labels", 8 + header_len, file_size);
  return out;
}

}  // namespace dstrain_cli
