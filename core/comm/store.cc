#include "core/comm/store.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "core/comm/tcp_store.h"

namespace dst {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char *kConfigKeyPrefix = "dstrain/config_check/";
constexpr size_t kKeysPerWait = 4096;  // well under the store's per-request limit
constexpr size_t kRanksNamed = 8;      // rank 0's message names at most this many ranks

std::string HashKey(int64_t rank) {
  return std::string(kConfigKeyPrefix) + "hash/" + std::to_string(rank);
}

std::string TextKey() {
  return std::string(kConfigKeyPrefix) + "rank0_text";
}

// FNV-1a: stable across processes, builds and hosts (std::hash is not
// guaranteed to be), and collisions do not matter for a consistency check.
uint64_t Fnv1a64(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : text) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string Hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::vector<uint8_t> Bytes(const std::string &text) {
  return {text.begin(), text.end()};
}

std::string Text(const std::vector<uint8_t> &bytes) {
  return {bytes.begin(), bytes.end()};
}

std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

// Up to ~40 characters of `text` starting a little before `at`, with
// newlines and tabs escaped so that the message stays on one line.
std::string Excerpt(const std::string &text, size_t at) {
  constexpr size_t kBefore = 10, kLength = 40;
  const size_t begin = at > kBefore ? at - kBefore : 0;
  std::string out;
  for (size_t i = begin; i < text.size() && i < begin + kLength; ++i) {
    if (text[i] == '\n') {
      out += "\\n";
    } else if (text[i] == '\t') {
      out += "\\t";
    } else {
      out += text[i];
    }
  }
  if (text.size() <= at) out += "<end>";
  return "'" + out + "'";
}

std::string FirstDifference(const std::string &rank0_text, const std::string &mine,
                            int64_t rank) {
  const auto [a, b] = std::mismatch(rank0_text.begin(), rank0_text.end(), mine.begin(), mine.end());
  const size_t at = static_cast<size_t>(a - rank0_text.begin());
  (void)b;
  return "; the resolved configs first differ at byte " + std::to_string(at) + ": rank 0 has " +
         Excerpt(rank0_text, at) + ", rank " + std::to_string(rank) + " has " + Excerpt(mine, at);
}

std::string SameConfigAdvice() {
  return ". Start all ranks with the same ds_config (the same file contents and the same "
         "command-line options)";
}

// Ranks other than 0: compare with rank 0's hash and, on a mismatch, use
// rank 0's text to say where the configs part.
Status CompareWithRankZero(Store &store, int64_t rank, const std::string &config_text,
                           const std::string &mine, Clock::time_point deadline) {
  auto theirs = store.Get(HashKey(0), Remaining(deadline));
  if (!theirs.ok()) return theirs.status();
  if (Text(theirs.value()) == mine) return Status::Ok();
  std::string message = "rank " + std::to_string(rank) +
                        " was started with a different config than rank 0 (config hash " + mine +
                        ", rank 0's " + Text(theirs.value()) + ")";
  // Rank 0 publishes its text before its hash, so it is there already.
  auto rank0_text = store.Get(TextKey(), std::chrono::milliseconds(1000));
  if (rank0_text.ok()) message += FirstDifference(Text(rank0_text.value()), config_text, rank);
  return ConfigError(message + SameConfigAdvice());
}

// Rank 0: wait for every rank's hash and name every rank that differs.
Status CompareAllWithMine(Store &store, int64_t world_size, const std::string &mine,
                          Clock::time_point deadline) {
  std::vector<std::string> keys;
  for (int64_t r = 1; r < world_size; ++r) {
    keys.push_back(HashKey(r));
    if (keys.size() == kKeysPerWait || r == world_size - 1) {
      DST_RETURN_IF_ERROR(store.Wait(keys, Remaining(deadline)));
      keys.clear();
    }
  }
  std::vector<int64_t> differing;
  for (int64_t r = 1; r < world_size; ++r) {
    auto theirs = store.Get(HashKey(r), Remaining(deadline));
    if (!theirs.ok()) return theirs.status();
    if (Text(theirs.value()) != mine) differing.push_back(r);
  }
  if (differing.empty()) return Status::Ok();
  std::string names;
  for (size_t i = 0; i < differing.size() && i < kRanksNamed; ++i) {
    names += (i == 0 ? "" : ", ") + std::to_string(differing[i]);
  }
  if (differing.size() > kRanksNamed) {
    names += " and " + std::to_string(differing.size() - kRanksNamed) + " more";
  }
  return ConfigError(std::string(differing.size() == 1 ? "rank " : "ranks ") + names +
                     (differing.size() == 1 ? " was" : " were") +
                     " started with a different config than rank 0 (config hash " + mine +
                     "); each of them reports where its config differs" + SameConfigAdvice());
}

}  // namespace

Result<std::unique_ptr<Store>> ConnectTcpStore(const TcpStoreOptions &options) {
  auto store = TcpStore::Open(options);
  if (!store.ok()) return store.status();
  return std::unique_ptr<Store>(std::move(store.value()));
}

Status CheckSameConfig(Store &store, int64_t rank, int64_t world_size,
                       const std::string &config_text, std::chrono::milliseconds timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return InvalidArgument("CheckSameConfig: rank " + std::to_string(rank) +
                           " is out of range for world size " + std::to_string(world_size));
  }
  const Clock::time_point deadline =
      Clock::now() + std::min(timeout, std::chrono::milliseconds(int64_t{1} << 40));
  const std::string mine = Hex(Fnv1a64(config_text));
  if (rank == 0) DST_RETURN_IF_ERROR(store.Set(TextKey(), Bytes(config_text)));
  DST_RETURN_IF_ERROR(store.Set(HashKey(rank), Bytes(mine)));
  Status status = rank == 0 ? CompareAllWithMine(store, world_size, mine, deadline)
                            : CompareWithRankZero(store, rank, config_text, mine, deadline);
  return status.context("checking that every rank runs the same config");
}

}  // namespace dst
