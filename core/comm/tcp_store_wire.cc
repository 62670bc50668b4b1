#include "core/comm/tcp_store_wire.h"

#include <utility>

namespace dst::tcp_store {
namespace {

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(v); }
  void U32(uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out_.push_back(static_cast<uint8_t>(v >> shift));
  }
  void I64(int64_t v) {
    const auto u = static_cast<uint64_t>(v);
    for (int shift = 56; shift >= 0; shift -= 8) out_.push_back(static_cast<uint8_t>(u >> shift));
  }
  void Bytes(std::span<const uint8_t> bytes) {
    U32(static_cast<uint32_t>(bytes.size()));
    out_.insert(out_.end(), bytes.begin(), bytes.end());
  }
  void Str(const std::string &s) { Bytes({reinterpret_cast<const uint8_t *>(s.data()), s.size()}); }
  void Strs(const std::vector<std::string> &list) {
    U32(static_cast<uint32_t>(list.size()));
    for (const std::string &s : list) Str(s);
  }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

// Reads fields in order; the first failure sticks and names what was being
// read, so a decoder can read everything and check once at the end.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}

  uint8_t U8(const char *what) { return Need(1, what) ? in_[pos_++] : 0; }
  uint32_t U32(const char *what) {
    if (!Need(4, what)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | in_[pos_++];
    return v;
  }
  int64_t I64(const char *what) {
    if (!Need(8, what)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | in_[pos_++];
    return static_cast<int64_t>(v);
  }
  std::vector<uint8_t> Bytes(const char *what, size_t limit) {
    const uint32_t size = U32(what);
    if (!ok()) return {};
    if (size > limit) {
      Fail(what, "length " + std::to_string(size) + " over the limit");
      return {};
    }
    if (!Need(size, what)) return {};
    std::vector<uint8_t> bytes(in_.begin() + pos_, in_.begin() + pos_ + size);
    pos_ += size;
    return bytes;
  }
  std::string Str(const char *what, size_t limit) {
    const std::vector<uint8_t> bytes = Bytes(what, limit);
    return std::string(bytes.begin(), bytes.end());
  }
  std::vector<std::string> Strs(const char *what, size_t count_limit, size_t each_limit) {
    const uint32_t count = U32(what);
    if (!ok()) return {};
    if (count > count_limit) {
      Fail(what, std::to_string(count) + " entries, over the limit");
      return {};
    }
    std::vector<std::string> list;
    for (uint32_t i = 0; i < count && ok(); ++i) list.push_back(Str(what, each_limit));
    return list;
  }

  bool ok() const { return error_.empty(); }
  // The first error, or one about bytes left over after the last field.
  Status Finish() const {
    if (!ok()) return CommFailure("malformed store message: " + error_);
    if (pos_ != in_.size()) {
      return CommFailure("malformed store message: " + std::to_string(in_.size() - pos_) +
                         " unexpected trailing bytes");
    }
    return Status::Ok();
  }

 private:
  bool Need(size_t n, const char *what) {
    if (!ok()) return false;
    if (in_.size() - pos_ < n) {
      Fail(what, "truncated");
      return false;
    }
    return true;
  }
  void Fail(const char *what, const std::string &why) {
    if (ok()) error_ = std::string(what) + ": " + why;
  }

  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  std::string error_;
};

bool IsKnownOp(uint8_t op) {
  return op >= static_cast<uint8_t>(Op::kHello) && op <= static_cast<uint8_t>(Op::kAdd);
}

bool IsKnownReply(uint8_t kind) {
  return kind >= static_cast<uint8_t>(ReplyKind::kOk) &&
         kind <= static_cast<uint8_t>(ReplyKind::kError);
}

// The single key of kSet/kGet/kAdd, or "" when absent (the encoder never
// produces that; it only guards against misuse).
const std::string &FirstKey(const Request &request) {
  static const std::string kEmpty;
  return request.keys.empty() ? kEmpty : request.keys.front();
}

}  // namespace

std::vector<uint8_t> EncodeRequest(const Request &request) {
  Writer w;
  w.U8(static_cast<uint8_t>(request.op));
  switch (request.op) {
    case Op::kHello:
      w.U32(request.magic);
      w.U32(request.version);
      w.Str(request.token);
      w.I64(request.rank);
      w.I64(request.world_size);
      break;
    case Op::kSet:
      w.Str(FirstKey(request));
      w.Bytes(request.value);
      break;
    case Op::kGet:
    case Op::kAdd:
      w.Str(FirstKey(request));
      w.I64(request.number);
      break;
    case Op::kWait:
      w.Strs(request.keys);
      w.I64(request.number);
      break;
  }
  return w.Take();
}

Result<Request> DecodeRequest(std::span<const uint8_t> payload) {
  Reader r(payload);
  Request request;
  const uint8_t op = r.U8("request kind");
  if (r.ok() && !IsKnownOp(op)) {
    return CommFailure("malformed store message: unknown request kind " + std::to_string(op));
  }
  request.op = static_cast<Op>(op);
  switch (request.op) {
    case Op::kHello:
      request.magic = r.U32("magic");
      request.version = r.U32("protocol version");
      request.token = r.Str("job token", kMaxTokenBytes);
      request.rank = r.I64("rank");
      request.world_size = r.I64("world size");
      break;
    case Op::kSet:
      request.keys = {r.Str("key", kMaxKeyBytes)};
      request.value = r.Bytes("value", kMaxFrameBytes);
      break;
    case Op::kGet:
    case Op::kAdd:
      request.keys = {r.Str("key", kMaxKeyBytes)};
      request.number = r.I64("number");
      break;
    case Op::kWait:
      request.keys = r.Strs("keys", kMaxKeysPerWait, kMaxKeyBytes);
      request.number = r.I64("timeout");
      break;
  }
  DST_RETURN_IF_ERROR(r.Finish());
  return request;
}

std::vector<uint8_t> EncodeReply(const Reply &reply) {
  Writer w;
  w.U8(static_cast<uint8_t>(reply.kind));
  switch (reply.kind) {
    case ReplyKind::kOk:
      break;
    case ReplyKind::kValue:
      w.Bytes(reply.value);
      break;
    case ReplyKind::kNumber:
      w.I64(reply.number);
      break;
    case ReplyKind::kTimeout:
      w.Strs(reply.keys);
      break;
    case ReplyKind::kError:
      w.Str(reply.message);
      break;
  }
  return w.Take();
}

Result<Reply> DecodeReply(std::span<const uint8_t> payload) {
  Reader r(payload);
  Reply reply;
  const uint8_t kind = r.U8("reply kind");
  if (r.ok() && !IsKnownReply(kind)) {
    return CommFailure("malformed store message: unknown reply kind " + std::to_string(kind));
  }
  reply.kind = static_cast<ReplyKind>(kind);
  switch (reply.kind) {
    case ReplyKind::kOk:
      break;
    case ReplyKind::kValue:
      reply.value = r.Bytes("value", kMaxFrameBytes);
      break;
    case ReplyKind::kNumber:
      reply.number = r.I64("number");
      break;
    case ReplyKind::kTimeout:
      reply.keys = r.Strs("missing keys", kMaxKeysPerWait, kMaxKeyBytes);
      break;
    case ReplyKind::kError:
      reply.message = r.Str("error message", kMaxFrameBytes);
      break;
  }
  DST_RETURN_IF_ERROR(r.Finish());
  return reply;
}

namespace {

void AppendU32(uint32_t value, std::vector<uint8_t> &out) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(value >> shift));
}

uint32_t ReadU32(std::span<const uint8_t> bytes) {
  uint32_t value = 0;
  for (size_t i = 0; i < 4 && i < bytes.size(); ++i) value = (value << 8) | bytes[i];
  return value;
}

}  // namespace

void AppendFrame(std::span<const uint8_t> payload, std::vector<uint8_t> &out) {
  AppendU32(kFrameMagic, out);
  AppendU32(static_cast<uint32_t>(payload.size()), out);
  out.insert(out.end(), payload.begin(), payload.end());
}

Result<uint32_t> FrameLength(std::span<const uint8_t> header, std::string_view peer) {
  if (header.size() < kFrameHeaderBytes || ReadU32(header) != kFrameMagic) {
    return CommFailure("malformed store message: " + std::string(peer) +
                       " sent bytes that are not a dstrain store frame (it is not a dstrain "
                       "store or rank, is another dstrain version, or the stream is corrupt)");
  }
  const uint32_t size = ReadU32(header.subspan(4));
  if (size > kMaxFrameBytes) {
    return CommFailure("malformed store message: " + std::string(peer) +
                       " announced a message of " + std::to_string(size) +
                       " bytes, over the store's limit of " + std::to_string(kMaxFrameBytes) +
                       " bytes");
  }
  return size;
}

}  // namespace dst::tcp_store
