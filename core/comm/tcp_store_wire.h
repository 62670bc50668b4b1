// Internal to the TCP store: the wire format shared by client and server.
//
// A frame is a 4-byte big-endian payload length followed by the payload. A
// payload starts with one byte naming the request or reply, then its fields:
// integers big-endian, strings and byte strings as a 4-byte length plus the
// bytes. Every length is checked against what remains and against fixed
// limits, so a corrupt or foreign peer produces an error, not a huge
// allocation.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "core/common/status.h"

namespace dst::tcp_store {

// "dst1": the first field of the handshake. A peer that is not a dstrain
// store (or is another protocol version) fails the handshake by name.
inline constexpr uint32_t kMagic = 0x64737431;
inline constexpr uint32_t kProtocolVersion = 2;

// Every frame starts with these 4 bytes ("DSTF"), then the payload's length
// (4 bytes, big-endian): bytes from something that is not a dstrain store
// (or a corrupt stream) are named at once instead of being read as a length
// and waited on until the timeout.
inline constexpr uint32_t kFrameMagic = 0x44535446;
inline constexpr size_t kFrameHeaderBytes = 8;

// Rendezvous traffic is addresses, ids and config text (bytes to kilobytes);
// a length near these limits is corruption or a foreign client.
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxTokenBytes = 4096;
inline constexpr size_t kMaxKeysPerWait = 1u << 16;

enum class Op : uint8_t { kHello = 1, kSet = 2, kGet = 3, kWait = 4, kAdd = 5 };
enum class ReplyKind : uint8_t { kOk = 1, kValue = 2, kNumber = 3, kTimeout = 4, kError = 5 };

// One client request; which fields are used depends on `op`.
struct Request {
  Op op = Op::kHello;
  // kHello
  uint32_t magic = kMagic;
  uint32_t version = kProtocolVersion;
  std::string token;
  int64_t rank = 0;
  int64_t world_size = 1;
  // kSet, kGet, kAdd: keys[0]; kWait: all of them.
  std::vector<std::string> keys;
  std::vector<uint8_t> value;  // kSet
  int64_t number = 0;          // kGet, kWait: timeout in ms; kAdd: delta
};

// One server reply.
struct Reply {
  ReplyKind kind = ReplyKind::kOk;
  std::vector<uint8_t> value;     // kValue
  int64_t number = 0;             // kNumber
  std::vector<std::string> keys;  // kTimeout: the keys still missing
  std::string message;            // kError
};

// A payload (without the length prefix) and its decoding. Decoding fails
// with a kComm error on truncation, trailing bytes, an unknown kind or a
// length over the limits.
std::vector<uint8_t> EncodeRequest(const Request &request);
Result<Request> DecodeRequest(std::span<const uint8_t> payload);
std::vector<uint8_t> EncodeReply(const Reply &reply);
Result<Reply> DecodeReply(std::span<const uint8_t> payload);

// Appends the frame header (magic, length) and the payload to `out`.
void AppendFrame(std::span<const uint8_t> payload, std::vector<uint8_t> &out);
// The payload length announced by a frame header (the first
// kFrameHeaderBytes of `header`); a kComm error when the header does not
// start with kFrameMagic or announces more than kMaxFrameBytes. `peer` names
// the other side in the message ("the peer", "the rendezvous store").
Result<uint32_t> FrameLength(std::span<const uint8_t> header, std::string_view peer);

// A kComm status (status.h has no helper for it).
inline Status CommFailure(std::string message) {
  return {Code::kComm, std::move(message)};
}

}  // namespace dst::tcp_store
