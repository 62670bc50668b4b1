// Agreement between ranks through the rendezvous store, for operations every
// rank must take part in but that must not ride on the collectives (a
// checkpoint save or load): each rank posts a report (ok or an error, plus a
// JSON payload) under a key of its own and reads the reports it needs. A rank
// that never takes part — it died, or it is busy elsewhere — is named once the
// timeout expires; nothing can pair with a training collective by mistake.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/comm/store.h"
#include "core/common/status.h"

namespace dst {

struct RankReport {
  int64_t rank = 0;
  Status status;  // this rank's outcome
  nlohmann::json payload;
  bool ok() const { return status.ok(); }
};

// Posts `mine` under `prefix` + rank.
Status PostReport(Store &store, const std::string &prefix, const RankReport &mine);

// Reads the reports of `ranks` (in that order), waiting up to `timeout` in
// all. A report that does not arrive is a kComm error naming the rank, what it
// did not take part in (`what`), the timeout, and which rank died if the
// store knows.
Result<std::vector<RankReport>> ReadReports(Store &store, const std::string &prefix,
                                            const std::vector<int64_t> &ranks,
                                            std::chrono::milliseconds timeout,
                                            const std::string &what);

// The first failed report as a Status ("rank 2: <its error>", its code), or Ok.
Status FirstFailure(const std::vector<RankReport> &reports);

}  // namespace dst
