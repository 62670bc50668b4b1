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

// The keys of one check. Every rank counts its own checks, and all ranks make
// the same calls, so the n-th check of every rank uses the same keys and a
// later check never reads an earlier one's hashes.
struct CheckKeys {
  std::string prefix;  // "dstrain/config_check/<n>/"
  std::string Hash(int64_t rank) const { return prefix + "hash/" + std::to_string(rank); }
  std::string Text(int64_t rank) const { return prefix + "text/" + std::to_string(rank); }
};

Result<CheckKeys> NextCheckKeys(Store &store, int64_t rank) {
  auto round = store.Add(std::string(kConfigKeyPrefix) + "rounds/" + std::to_string(rank), 1);
  if (!round.ok()) return round.status();
  return CheckKeys{std::string(kConfigKeyPrefix) + std::to_string(round.value()) + "/"};
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

// Where `other_rank`'s config text first departs from rank 0's.
std::string FirstDifference(const std::string &rank0_text, const std::string &other_text,
                            int64_t other_rank) {
  const auto first =
      std::mismatch(rank0_text.begin(), rank0_text.end(), other_text.begin(), other_text.end());
  const auto at = static_cast<size_t>(first.first - rank0_text.begin());
  return "; the resolved configs first differ at byte " + std::to_string(at) + ": rank 0 has " +
         Excerpt(rank0_text, at) + ", rank " + std::to_string(other_rank) + " has " +
         Excerpt(other_text, at);
}

std::string SameConfigAdvice() {
  return ". Start all ranks with the same ds_config (the same file contents and the same "
         "command-line options)";
}

// Ranks other than 0: compare with rank 0's hash and, on a mismatch, use
// rank 0's text to say where the configs part.
Status CompareWithRankZero(Store &store, const CheckKeys &keys, int64_t rank,
                           const std::string &config_text, const std::string &mine,
                           Clock::time_point deadline) {
  auto theirs = store.Get(keys.Hash(0), Remaining(deadline));
  if (!theirs.ok()) return theirs.status();
  if (Text(theirs.value()) == mine) return Status::Ok();
  std::string message = "rank " + std::to_string(rank) +
                        " was started with a different config than rank 0 (config hash " + mine +
                        ", rank 0's " + Text(theirs.value()) + ")";
  // Every rank publishes its text before its hash, so it is there already
  // (unless rank 0 has exited since).
  auto rank0_text = store.Get(keys.Text(0), std::chrono::milliseconds(1000));
  if (rank0_text.ok()) message += FirstDifference(Text(rank0_text.value()), config_text, rank);
  return ConfigError(message + SameConfigAdvice());
}

// "ranks 2, 3 and 5 more"
std::string RankList(const std::vector<int64_t> &ranks) {
  std::string names = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < kRanksNamed; ++i) {
    names += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  if (ranks.size() > kRanksNamed) {
    names += " and " + std::to_string(ranks.size() - kRanksNamed) + " more";
  }
  return names;
}

// Rank 0: wait for every rank's hash and name every rank that differs. Rank
// 0 also says where the first of them differs: the other ranks say it too,
// but a launcher may stop them as soon as rank 0 fails.
Status CompareAllWithMine(Store &store, const CheckKeys &keys, int64_t world_size,
                          const std::string &config_text, const std::string &mine,
                          Clock::time_point deadline) {
  std::vector<std::string> batch;
  for (int64_t r = 1; r < world_size; ++r) {
    batch.push_back(keys.Hash(r));
    if (batch.size() == kKeysPerWait || r == world_size - 1) {
      DST_RETURN_IF_ERROR(store.Wait(batch, Remaining(deadline)));
      batch.clear();
    }
  }
  std::vector<int64_t> differing;
  for (int64_t r = 1; r < world_size; ++r) {
    auto theirs = store.Get(keys.Hash(r), Remaining(deadline));
    if (!theirs.ok()) return theirs.status();
    if (Text(theirs.value()) != mine) differing.push_back(r);
  }
  if (differing.empty()) return Status::Ok();
  std::string message = RankList(differing) + (differing.size() == 1 ? " was" : " were") +
                        " started with a different config than rank 0";
  auto first_text = store.Get(keys.Text(differing.front()), Remaining(deadline));
  if (first_text.ok()) {
    message += FirstDifference(config_text, Text(first_text.value()), differing.front());
  }
  return ConfigError(message + SameConfigAdvice());
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
  Result<CheckKeys> keys = NextCheckKeys(store, rank);
  if (!keys.ok()) return keys.status();
  DST_RETURN_IF_ERROR(store.Set(keys->Text(rank), Bytes(config_text)));
  DST_RETURN_IF_ERROR(store.Set(keys->Hash(rank), Bytes(mine)));
  Status status =
      rank == 0 ? CompareAllWithMine(store, keys.value(), world_size, config_text, mine, deadline)
                : CompareWithRankZero(store, keys.value(), rank, config_text, mine, deadline);
  return status.context("checking that every rank runs the same config");
}

std::string DescribeLostRanks(Store &store, std::chrono::milliseconds wait) {
  Result<std::vector<uint8_t>> lost = store.Get(kLostKey, wait);
  if (lost.ok()) {
    const std::string ranks(lost.value().begin(), lost.value().end());
    const size_t comma = ranks.find(',');
    return "rank " + ranks.substr(0, comma) +
           " died first (its connection to the rendezvous store closed before it finished)" +
           (comma == std::string::npos ? "" : "; lost ranks in order: " + ranks);
  }
  const std::string why = lost.status().message();
  if (why.find("timed out") != std::string::npos || why.find("timeout") != std::string::npos)
    return "";
  return "the rendezvous store on rank 0 is unreachable (" + why + "): rank 0 has died or exited";
}

void FinishJob(Store &store, int64_t rank, int64_t world_size, std::chrono::milliseconds wait) {
  if (world_size <= 1) return;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  if (rank != 0) {
    // Finished; then wait for rank 0's server to close (the Get fails when
    // it does), so that an engine this process creates next cannot reach the
    // old job's server while it is shutting down.
    if (!store.Set(kFinishedKey + std::to_string(rank), {}).ok()) return;
    (void)store.Get("__dstrain/closed", wait);
    return;
  }
  // Every other rank finished (it now waits for the server to close) or left.
  for (int64_t r = 1; r < world_size; ++r)
    while (std::chrono::steady_clock::now() < deadline) {
      if (store.Get(kFinishedKey + std::to_string(r), std::chrono::milliseconds(200)).ok()) break;
      if (store.Get(kDoneKey + std::to_string(r), std::chrono::milliseconds(1)).ok()) break;
    }
}

}  // namespace dst
