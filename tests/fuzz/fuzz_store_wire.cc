// The rendezvous store's wire messages: a frame header, then a request and a
// reply decoding of the payload; whatever decodes must encode back to the
// same bytes (the formats have one encoding).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "core/comm/tcp_store_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  namespace wire = dst::tcp_store;
  const std::span<const uint8_t> bytes(data, size);
  dst::Result<uint32_t> length = wire::FrameLength(bytes, "the fuzzer");
  std::span<const uint8_t> payload = bytes;
  if (length.ok() && size - wire::kFrameHeaderBytes >= length.value())
    payload = bytes.subspan(wire::kFrameHeaderBytes, length.value());
  if (dst::Result<wire::Request> request = wire::DecodeRequest(payload); request.ok()) {
    const std::vector<uint8_t> again = wire::EncodeRequest(request.value());
    if (!std::equal(again.begin(), again.end(), payload.begin(), payload.end())) std::abort();
  }
  if (dst::Result<wire::Reply> reply = wire::DecodeReply(payload); reply.ok()) {
    const std::vector<uint8_t> again = wire::EncodeReply(reply.value());
    if (!std::equal(again.begin(), again.end(), payload.begin(), payload.end())) std::abort();
  }
  return 0;
}
