// Safetensors round trips, format details, and the reader's refusal of every
// kind of corrupt file (with an error naming the file and the tensor).
#include "core/checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace dst {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("dst_safetensors_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string &name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::string ReadFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file with a hand-written header (not padded) followed by `data`.
std::string RawFile(const std::string &header, const std::string &data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

uint64_t HeaderLength(const std::string &file) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(file[i])) << (8 * i);
  return n;
}

template <typename T>
std::vector<T> AsVector(const LoadedTensor &t) {
  std::vector<T> v(t.bytes.size() / sizeof(T));
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

TEST_F(SafetensorsTest, RoundTripsSeveralDtypesAndAScalar) {
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x7bff, 0x0001};
  std::vector<uint16_t> bf16 = {0x3f80, 0xbf80, 0x7f7f, 0x0080};
  std::vector<int32_t> i32 = {-1, 0, 2147483647, -2147483647 - 1, 7};
  std::vector<int64_t> i64 = {INT64_MIN, INT64_MAX};
  std::vector<uint8_t> u8 = {0, 1, 254, 255, 128};
  float scalar = 42.0f;
  std::vector<TensorRef> tensors = {
      {"w.f32", TensorDType::kF32, {2, 3}, f32.data()},
      {"h.f16", TensorDType::kF16, {4}, f16.data()},
      {"b.bf16", TensorDType::kBF16, {2, 1, 2}, bf16.data()},
      {"i32", TensorDType::kI32, {5}, i32.data()},
      {"i64", TensorDType::kI64, {1, 2}, i64.data()},
      {"u8", TensorDType::kU8, {5}, u8.data()},
      {"scalar", TensorDType::kF32, {}, &scalar},
      {"empty", TensorDType::kF32, {0, 3}, nullptr},
  };
  const std::string path = Path("round.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());

  Result<SafetensorsFile> r = ReadSafetensors(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const SafetensorsFile &f = r.value();
  EXPECT_TRUE(f.metadata.empty());
  ASSERT_EQ(f.tensors.size(), tensors.size());

  const LoadedTensor &w = f.tensors.at("w.f32");
  EXPECT_EQ(w.dtype, TensorDType::kF32);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.numel(), 6);
  EXPECT_EQ(std::memcmp(w.f32(), f32.data(), f32.size() * 4), 0);  // bit-exact, incl. -0.0

  EXPECT_EQ(f.tensors.at("h.f16").dtype, TensorDType::kF16);
  EXPECT_EQ(AsVector<uint16_t>(f.tensors.at("h.f16")), f16);
  EXPECT_EQ(f.tensors.at("b.bf16").dtype, TensorDType::kBF16);
  EXPECT_EQ(f.tensors.at("b.bf16").shape, (std::vector<int64_t>{2, 1, 2}));
  EXPECT_EQ(AsVector<uint16_t>(f.tensors.at("b.bf16")), bf16);
  EXPECT_EQ(AsVector<int32_t>(f.tensors.at("i32")), i32);
  EXPECT_EQ(AsVector<int64_t>(f.tensors.at("i64")), i64);
  EXPECT_EQ(AsVector<uint8_t>(f.tensors.at("u8")), u8);

  const LoadedTensor &s = f.tensors.at("scalar");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.f32()[0], 42.0f);

  const LoadedTensor &e = f.tensors.at("empty");
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.bytes.empty());
}

TEST_F(SafetensorsTest, MetadataRoundTrips) {
  float x[2] = {1, 2};
  std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"step", "17"}, {"note", "quotes \" and unicode \xc3\xa9"}};
  const std::string path = Path("meta.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"x", TensorDType::kF32, {2}, x}}, meta).ok());
  Result<SafetensorsFile> r = ReadSafetensors(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().metadata, meta);
  EXPECT_EQ(r.value().tensors.count("__metadata__"), 0u);
  EXPECT_EQ(r.value().tensors.at("x").f32()[1], 2.0f);
}

TEST_F(SafetensorsTest, MetadataOnlyFileWithNoTensors) {
  const std::string path = Path("none.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {}, {{"k", "v"}}).ok());
  Result<SafetensorsFile> r = ReadSafetensors(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r.value().tensors.empty());
  EXPECT_EQ(r.value().metadata.at("k"), "v");
}

TEST_F(SafetensorsTest, HeaderIsPaddedAlignedAndKeepsGivenOrder) {
  float a = 1, b[3] = {2, 3, 4};
  const std::string path = Path("layout.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path, {{"zz", TensorDType::kF32, {}, &a}, {"aa", TensorDType::kF32, {3}, b}})
          .ok());
  std::string file = ReadFile(path);
  uint64_t n = HeaderLength(file);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(file.size(), 8 + n + 16);
  std::string header = file.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  // Trailing padding is spaces only.
  size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.find("\"zz\""), header.find("\"aa\""));
  EXPECT_NE(header.find("\"data_offsets\":[0,4]"), std::string::npos) << header;
  EXPECT_NE(header.find("\"data_offsets\":[4,16]"), std::string::npos) << header;
  // Raw data: the bytes in order right after the header.
  float back[4];
  std::memcpy(back, file.data() + 8 + n, 16);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[3], 4.0f);
}

TEST_F(SafetensorsTest, ReadsUnpaddedAndReorderedFilesFromOtherWriters) {
  // Offsets need not follow the header order; the header need not be padded.
  float d[3] = {7, 8, 9};
  std::string data(reinterpret_cast<const char *>(d), sizeof d);
  std::string header = R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                       R"("a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})";
  const std::string path = Path("other.safetensors");
  WriteFile(path, RawFile(header, data));
  Result<SafetensorsFile> r = ReadSafetensors(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().tensors.at("a").f32()[0], 7.0f);
  EXPECT_EQ(r.value().tensors.at("b").f32()[1], 9.0f);
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  float x[4] = {};
  const std::string path = Path("bad.safetensors");
  Status dup =
      WriteSafetensors(path, {{"x", TensorDType::kF32, {4}, x}, {"x", TensorDType::kF32, {4}, x}});
  EXPECT_EQ(dup.code(), Code::kInvalidArgument);
  EXPECT_NE(dup.message().find("'x'"), std::string::npos) << dup.message();

  Status null = WriteSafetensors(path, {{"y", TensorDType::kF32, {4}, nullptr}});
  EXPECT_EQ(null.code(), Code::kInvalidArgument);
  EXPECT_NE(null.message().find("'y'"), std::string::npos) << null.message();

  Status neg = WriteSafetensors(path, {{"z", TensorDType::kF32, {-1, 4}, x}});
  EXPECT_EQ(neg.code(), Code::kInvalidArgument);
  EXPECT_NE(neg.message().find("'z'"), std::string::npos) << neg.message();

  Status huge = WriteSafetensors(path, {{"h", TensorDType::kI64, {1ll << 40, 1ll << 40}, x}});
  EXPECT_EQ(huge.code(), Code::kInvalidArgument);

  Status reserved = WriteSafetensors(path, {{"__metadata__", TensorDType::kF32, {1}, x}});
  EXPECT_EQ(reserved.code(), Code::kInvalidArgument);

  Status empty_name = WriteSafetensors(path, {{"", TensorDType::kF32, {1}, x}});
  EXPECT_EQ(empty_name.code(), Code::kInvalidArgument);
}

TEST_F(SafetensorsTest, WriteToMissingDirectoryIsIo) {
  float x = 0;
  const std::string path = Path("no/such/dir/x.safetensors");
  Status s = WriteSafetensors(path, {{"x", TensorDType::kF32, {}, &x}});
  EXPECT_EQ(s.code(), Code::kIo);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
}

TEST_F(SafetensorsTest, MissingFileIsIo) {
  const std::string path = Path("does_not_exist.safetensors");
  Result<SafetensorsFile> r = ReadSafetensors(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kIo);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
}

TEST_F(SafetensorsTest, DirectoryIsIo) {
  Result<SafetensorsFile> r = ReadSafetensors(dir_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kIo);
}

// Each case is a corrupt file; the reader must say kCheckpoint, name the file,
// and (when one tensor is at fault) name that tensor.
struct CorruptCase {
  const char *label;
  std::string bytes;
  const char *tensor;  // expected in the message, or nullptr
};

std::string FloatBytes(int n) {
  return std::string(4 * n, '\x01');
}

std::vector<CorruptCase> CorruptCases() {
  const std::string ok_entry = R"("good":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::vector<CorruptCase> c;
  c.push_back({"empty file", "", nullptr});
  c.push_back({"shorter than the length field", std::string(5, '\0'), nullptr});
  {
    std::string f =
        RawFile(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", FloatBytes(1));
    f[0] = static_cast<char>(0xff);  // header length now larger than the file
    f[1] = static_cast<char>(0xff);
    c.push_back({"header length larger than file", f, nullptr});
  }
  {
    std::string f(8, '\xff');  // 2^64-1
    c.push_back({"header length 2^64-1", f, nullptr});
  }
  c.push_back({"header not JSON", RawFile("{not json at all", ""), nullptr});
  c.push_back({"header JSON but not an object", RawFile("[1, 2, 3]", ""), nullptr});
  c.push_back({"header cut mid-JSON",
               RawFile(R"({"t":{"dtype":"F32","shape":[1],"data_off)", FloatBytes(1)), nullptr});
  c.push_back({"unknown dtype",
               RawFile(R"({"weird":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})",
                       std::string(16, 'x')),
               "weird"});
  c.push_back({"dtype not a string",
               RawFile(R"({"t":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", FloatBytes(1)),
               "t"});
  c.push_back(
      {"shape numel mismatch",
       RawFile("{" + ok_entry + R"(,"mism":{"dtype":"F32","shape":[3,2],"data_offsets":[8,24]}})",
               FloatBytes(6)),
       "mism"});
  c.push_back(
      {"negative dimension",
       RawFile(R"({"neg":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", FloatBytes(1)),
       "neg"});
  c.push_back(
      {"fractional dimension",
       RawFile(R"({"frac":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", FloatBytes(1)),
       "frac"});
  c.push_back({"shape overflow",
               RawFile(R"({"big":{"dtype":"F32","shape":[4294967296,4294967296,16],)"
                       R"("data_offsets":[0,4]}})",
                       FloatBytes(1)),
               "big"});
  c.push_back({"missing shape",
               RawFile(R"({"noshape":{"dtype":"F32","data_offsets":[0,4]}})", FloatBytes(1)),
               "noshape"});
  c.push_back({"missing offsets",
               RawFile(R"({"nooff":{"dtype":"F32","shape":[1]}})", FloatBytes(1)), "nooff"});
  c.push_back(
      {"offsets out of range",
       RawFile("{" + ok_entry + R"(,"far":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
               FloatBytes(3)),
       "far"});
  c.push_back({"begin after end",
               RawFile(R"({"rev":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", FloatBytes(1)),
               "rev"});
  c.push_back(
      {"offsets overlapping",
       RawFile("{" + ok_entry + R"(,"over":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               FloatBytes(3)),
       "over"});
  c.push_back(
      {"offsets leave a gap",
       RawFile("{" + ok_entry + R"(,"gap":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
               FloatBytes(4)),
       "gap"});
  c.push_back(
      {"trailing bytes after the data", RawFile("{" + ok_entry + "}", FloatBytes(3)), nullptr});
  c.push_back({"data truncated", RawFile("{" + ok_entry + "}", FloatBytes(1)), "good"});
  c.push_back({"metadata not an object",
               RawFile(R"({"__metadata__":"x",)" + ok_entry + "}", FloatBytes(2)), nullptr});
  c.push_back({"metadata value not a string",
               RawFile(R"({"__metadata__":{"step":3},)" + ok_entry + "}", FloatBytes(2)), nullptr});
  c.push_back({"entry not an object", RawFile(R"({"str":"hello"})", ""), "str"});
  c.push_back({"unknown field",
               RawFile(R"({"extra":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})",
                       FloatBytes(1)),
               "extra"});
  c.push_back(
      {"duplicate name", RawFile("{" + ok_entry + "," + ok_entry + "}", FloatBytes(2)), "good"});
  return c;
}

TEST_F(SafetensorsTest, CorruptFilesAreCheckpointErrorsNamingFileAndTensor) {
  int i = 0;
  for (const CorruptCase &c : CorruptCases()) {
    SCOPED_TRACE(c.label);
    const std::string path = Path("corrupt_" + std::to_string(i++) + ".safetensors");
    WriteFile(path, c.bytes);
    Result<SafetensorsFile> r = ReadSafetensors(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kCheckpoint) << r.status().message();
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
    if (c.tensor != nullptr) {
      EXPECT_NE(r.status().message().find(std::string("'") + c.tensor + "'"), std::string::npos)
          << r.status().message();
    }
  }
}

TEST_F(SafetensorsTest, TruncationAtEveryLengthIsRejected) {
  std::vector<float> a(5, 1.0f), b(3, 2.0f);
  const std::string path = Path("full.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(
          path, {{"a", TensorDType::kF32, {5}, a.data()}, {"b", TensorDType::kF32, {3}, b.data()}},
          {{"k", "v"}})
          .ok());
  const std::string full = ReadFile(path);
  const std::string cut = Path("cut.safetensors");
  for (size_t len = 0; len < full.size(); ++len) {
    WriteFile(cut, full.substr(0, len));
    Result<SafetensorsFile> r = ReadSafetensors(cut);
    ASSERT_FALSE(r.ok()) << "length " << len;
    EXPECT_EQ(r.status().code(), Code::kCheckpoint) << "length " << len;
  }
}

TEST_F(SafetensorsTest, RandomCorruptionNeverCrashes) {
  std::vector<float> a(16, 0.5f);
  std::vector<int32_t> b(7, 3);
  const std::string path = Path("fuzz_src.safetensors");
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"alpha", TensorDType::kF32, {4, 4}, a.data()},
                                {"beta", TensorDType::kI32, {7}, b.data()}},
                               {{"m", "n"}})
                  .ok());
  const std::string full = ReadFile(path);
  const uint64_t header_end = 8 + HeaderLength(full);
  std::mt19937 rng(12345);
  const std::string fuzz = Path("fuzz.safetensors");
  int rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string f = full;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      // Mostly hit the length field and the header, where parsing happens.
      size_t pos = rng() % 4 == 0 ? rng() % f.size() : rng() % header_end;
      f[pos] = static_cast<char>(rng() & 0xff);
    }
    WriteFile(fuzz, f);
    Result<SafetensorsFile> r = ReadSafetensors(fuzz);
    if (!r.ok()) {
      ++rejected;
      EXPECT_EQ(r.status().code(), Code::kCheckpoint) << r.status().message();
    } else {
      // Accepted files must be self-consistent.
      for (const auto &[name, t] : r.value().tensors) {
        EXPECT_EQ(static_cast<size_t>(t.numel()) * DTypeSize(t.dtype), t.bytes.size()) << name;
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

// The reader that reads tensors one at a time: the same header checks as
// ReadSafetensors (every corrupt case fails the same way at Open), entries
// in data order, any byte range of a tensor, a file cut short after it was
// opened named with the tensor.
TEST_F(SafetensorsTest, ReaderReadsTensorsOneAtATime) {
  std::vector<float> a(5);
  for (int i = 0; i < 5; ++i) a[size_t(i)] = float(i) + 0.5f;
  const std::vector<uint16_t> b = {1, 2, 3, 4, 5, 6};
  const std::string path = Path("two.safetensors");
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"b", TensorDType::kBF16, {2, 3}, b.data()},
                                {"a", TensorDType::kF32, {5}, a.data()}},
                               {{"format", "pt"}})
                  .ok());
  Result<SafetensorsReader> opened = SafetensorsReader::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  SafetensorsReader reader = std::move(opened).value();
  ASSERT_EQ(reader.entries().size(), 2u);
  EXPECT_EQ(reader.entries()[0].name, "b");  // data order (the writer's order)
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.Find("missing"), nullptr);
  const SafetensorsEntry *ea = reader.Find("a");
  ASSERT_NE(ea, nullptr);
  EXPECT_EQ(ea->dtype, TensorDType::kF32);
  EXPECT_EQ(ea->shape, std::vector<int64_t>{5});
  EXPECT_EQ(ea->numel(), 5);
  std::vector<float> got(3);
  ASSERT_TRUE(reader.Read(*ea, 2 * sizeof(float), 3 * sizeof(float), got.data()).ok());
  EXPECT_EQ(got, std::vector<float>(a.begin() + 2, a.end()));
  std::vector<uint16_t> got_b(6);
  ASSERT_TRUE(reader.Read(*reader.Find("b"), 0, 12, got_b.data()).ok());
  EXPECT_EQ(got_b, b);
  EXPECT_EQ(reader.Read(*ea, 4, 20, got.data()).code(), Code::kInternal);  // past the tensor

  // Cut short after opening: the read names the file and the tensor.
  fs::resize_file(path, fs::file_size(path) - 8);
  const Status cut = reader.Read(*ea, 0, 5 * sizeof(float), got.data());
  EXPECT_EQ(cut.code(), Code::kCheckpoint) << cut.message();
  EXPECT_NE(cut.message().find("'a'"), std::string::npos) << cut.message();

  for (const CorruptCase &c : CorruptCases()) {
    SCOPED_TRACE(c.label);
    const std::string bad = Path("corrupt.safetensors");
    WriteFile(bad, c.bytes);
    Result<SafetensorsReader> r = SafetensorsReader::Open(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kCheckpoint) << r.status().message();
  }
  EXPECT_EQ(SafetensorsReader::Open(Path("absent.safetensors")).status().code(), Code::kIo);
}

TEST_F(SafetensorsTest, DTypeNamesAndSizes) {
  EXPECT_EQ(DTypeSize(TensorDType::kF32), 4u);
  EXPECT_EQ(DTypeSize(TensorDType::kF16), 2u);
  EXPECT_EQ(DTypeSize(TensorDType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(TensorDType::kI32), 4u);
  EXPECT_EQ(DTypeSize(TensorDType::kI64), 8u);
  EXPECT_EQ(DTypeSize(TensorDType::kU8), 1u);
  EXPECT_STREQ(DTypeName(TensorDType::kBF16), "BF16");
  EXPECT_STREQ(DTypeName(TensorDType::kI64), "I64");
}

}  // namespace
}  // namespace dst
