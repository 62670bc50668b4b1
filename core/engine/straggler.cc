#include "core/engine/straggler.h"

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

namespace dst {

namespace {

constexpr const char *kKey = "__dstrain/straggler/rank";

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

// The middle value (the mean of the two middle ones for an even count).
double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

StragglerVerdict JudgeStragglers(const std::vector<StragglerReport> &ranks, double tolerance,
                                 int64_t my_rank) {
  StragglerVerdict v;
  v.checked = true;
  if (ranks.empty()) return v;
  std::vector<double> times;
  for (const StragglerReport &r : ranks) times.push_back(r.compute_seconds);
  v.median_seconds = Median(std::move(times));
  if (v.median_seconds <= 0) return v;
  for (StragglerReport r : ranks) {
    r.slower_by = r.compute_seconds / v.median_seconds - 1;
    if (r.slower_by <= tolerance) continue;
    v.this_rank_slow |= r.rank == my_rank;
    v.slow.push_back(r);
  }
  std::sort(v.slow.begin(), v.slow.end(), [](const StragglerReport &a, const StragglerReport &b) {
    return a.slower_by > b.slower_by;
  });
  return v;
}

StragglerDetector::StragglerDetector(Store *store, int64_t rank, int64_t world, double tolerance,
                                     int64_t every, std::chrono::milliseconds timeout)
    : store_(store),
      rank_(rank),
      world_(world),
      tolerance_(tolerance),
      every_(std::max<int64_t>(1, every)),
      timeout_(timeout),
      host_(HostName()) {}

Result<StragglerVerdict> StragglerDetector::OnStep(double compute_seconds) {
  window_steps_.push_back(compute_seconds);
  if (++steps_ % every_ != 0 || store_ == nullptr || world_ < 2) {
    if (window_steps_.size() >= size_t(every_)) window_steps_.clear();
    return StragglerVerdict{};
  }
  ++window_;
  const double typical = Median(window_steps_);
  window_steps_.clear();
  // One key per rank, overwritten each window; readers wait for this window's value.
  const std::string mine =
      nlohmann::json{{"window", window_}, {"seconds", typical}, {"host", host_}}.dump();
  DST_RETURN_IF_ERROR(
      store_->Set(kKey + std::to_string(rank_), std::vector<uint8_t>(mine.begin(), mine.end())));
  std::vector<StragglerReport> reports;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (int64_t r = 0; r < world_; ++r) {
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      Result<std::vector<uint8_t>> value =
          store_->Get(kKey + std::to_string(r), std::max(left, std::chrono::milliseconds(1)));
      if (!value.ok()) {
        Status st = value.status();
        return st.context("straggler detection: waiting for rank " + std::to_string(r) +
                          "'s step times");
      }
      const nlohmann::json j = nlohmann::json::parse(value->begin(), value->end(), nullptr, false);
      if (j.is_object() && j.value("window", int64_t(-1)) >= window_) {
        reports.push_back({r, j.value("host", std::string()), j.value("seconds", 0.0), 0});
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline)
        return Status(Code::kComm, "straggler detection: rank " + std::to_string(r) +
                                       " did not post its step times for window " +
                                       std::to_string(window_) + " within the timeout");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  last_ = JudgeStragglers(reports, tolerance_, rank_);
  return last_;
}

}  // namespace dst
