#include "core/engine/rank_reports.h"

#include <algorithm>

namespace dst {

Status PostReport(Store &store, const std::string &prefix, const RankReport &mine) {
  const std::string text = nlohmann::json{
      {"rank", mine.rank},
      {"code", static_cast<int>(mine.status.code())},
      {"error", mine.status.message()},
      {"payload",
       mine.payload}}.dump();
  return store.Set(prefix + std::to_string(mine.rank),
                   std::vector<uint8_t>(text.begin(), text.end()));
}

Result<std::vector<RankReport>> ReadReports(Store &store, const std::string &prefix,
                                            const std::vector<int64_t> &ranks,
                                            std::chrono::milliseconds timeout,
                                            const std::string &what) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  std::vector<RankReport> reports;
  for (int64_t r : ranks) {
    const auto left =
        std::max(std::chrono::milliseconds(1),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    Result<std::vector<uint8_t>> value = store.Get(prefix + std::to_string(r), left);
    if (!value.ok()) {
      const std::string lost = DescribeLostRanks(store, std::chrono::milliseconds(500));
      const double seconds = double(timeout.count()) / 1000.0;
      return Status(Code::kComm, "rank " + std::to_string(r) + " did not take part in " + what +
                                     " within " + std::to_string(int64_t(seconds)) +
                                     " s (every rank must call it at the "
                                     "same point of training)" +
                                     (lost.empty() ? std::string() : "; " + lost));
    }
    nlohmann::json j =
        nlohmann::json::parse(value->begin(), value->end(), nullptr, /*exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return InternalError("malformed report from rank " + std::to_string(r) + " for " + what);
    RankReport report;
    report.rank = r;
    const int code = j.value("code", 0);
    if (code != 0) report.status = Status(static_cast<Code>(code), j.value("error", ""));
    report.payload = j.value("payload", nlohmann::json());
    reports.push_back(std::move(report));
  }
  return reports;
}

Status FirstFailure(const std::vector<RankReport> &reports) {
  for (const RankReport &r : reports)
    if (!r.ok())
      return Status(r.status.code(), "rank " + std::to_string(r.rank) + ": " + r.status.message());
  return Status::Ok();
}

}  // namespace dst
