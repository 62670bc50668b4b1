#include "metrics/monitor.h"

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>

#include "metrics/dashboard_assets.h"
#include "metrics/history.h"
#include "metrics/http_server.h"
#include "metrics/log.h"
#include "metrics/registry.h"

namespace dst::metrics {

namespace {

using Json = nlohmann::json;

std::string Dump(const Json &j) {
  // Invalid UTF-8 (e.g. in a timer name) is replaced, never thrown.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Replaces every non-empty "token" string in `j` by "<set>": the resolved
// config already does so, this guards against a caller passing a raw one.
void RedactTokens(Json *j) {
  if (j->is_object()) {
    for (auto it = j->begin(); it != j->end(); ++it) {
      if (it.key() == "token" && it->is_string() && !it->get<std::string>().empty()) {
        *it = "<set>";
      } else {
        RedactTokens(&*it);
      }
    }
  } else if (j->is_array()) {
    for (Json &e : *j) RedactTokens(&e);
  }
}

// The `last` query parameter of /api/v1/history: none, a count, or an error.
struct LastParam {
  std::optional<size_t> last;
  std::string error;  // non-empty: answer 400 with it
};

LastParam ParseLast(std::string_view query) {
  LastParam out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != "last") continue;
    if (out.last) {
      out.error = "the query parameter \"last\" is given more than once";
      return out;
    }
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    size_t n = 0;
    const auto r = std::from_chars(value.data(), value.data() + value.size(), n);
    if (value.empty() || value.size() > 9 || r.ec != std::errc() ||
        r.ptr != value.data() + value.size()) {
      out.error = "last=" + std::string(value) +
                  ": expected a number of steps from 0 to 999999999, e.g. last=100";
      return out;
    }
    out.last = n;
  }
  return out;
}

HttpResponse JsonResponse(const Json &j) {
  HttpResponse r;
  r.body = Dump(j);
  return r;
}

HttpResponse Error(int status, const std::string &message) {
  HttpResponse r;
  r.status = status;
  r.body = Dump(Json{{"error", message}, {"status", status}});
  return r;
}

}  // namespace

struct Monitor::Impl {
  explicit Impl(const MonitorOptions &o)
      : identity(o.identity),
        identity_json(IdentityToJson(o.identity)),
        rank_table(o.rank_table),
        history(static_cast<size_t>(std::max<int64_t>(0, o.config.history_steps))) {}

  HttpResponse Route(const HttpRequest &request) const;
  Json SampleOrNull(const std::shared_ptr<const StepSample> &s) const {
    return s ? SampleToJson(*s) : Json(nullptr);
  }
  Json Snapshot() const {
    const std::shared_ptr<const StepSample> latest = history.Latest();
    Json j{{"identity", identity_json}, {"sample", SampleOrNull(latest)}};
    if (latest && !latest->timeline.empty()) j["timeline"] = TimelineToJson(latest->timeline);
    return j;
  }
  std::string Exposition() const {
    std::lock_guard<std::mutex> lock(registry_mu);
    return registry->Exposition();
  }

  const RankIdentity identity;
  const Json identity_json;
  const RankTableFn rank_table;
  std::string config_body;  // the redacted config, dumped once

  std::mutex step_mu;              // serialises OnStep (registry baselines, log)
  mutable std::mutex registry_mu;  // a scrape sees whole steps
  std::unique_ptr<MetricsRegistry> registry;
  StepHistory history;
  std::unique_ptr<MetricsLog> log;
  // Last: destroyed first, so no handler runs while the rest goes away.
  std::unique_ptr<HttpServer> server;
};

HttpResponse Monitor::Impl::Route(const HttpRequest &request) const {
  const std::string_view path = request.path;
  if (path == "/metrics") {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = Exposition();
    return r;
  }
  if (path == "/api/v1/snapshot") return JsonResponse(Snapshot());
  if (path == "/api/v1/history") {
    const LastParam last = ParseLast(request.query);
    if (!last.error.empty()) return Error(400, last.error);
    const auto samples = history.Last(last.last.value_or(history.capacity()));
    Json steps = Json::array();
    for (const auto &s : samples) steps.push_back(SampleToJson(*s));
    return JsonResponse(Json{{"identity", identity_json}, {"steps", std::move(steps)}});
  }
  if (path == "/api/v1/ranks") {
    if (rank_table) return JsonResponse(Json{{"ranks", rank_table()}});
    const auto latest = history.Latest();
    Json age = nullptr;
    if (latest) age = std::max(0.0, UnixNow() - latest->unix_time);
    Json self = {
        {"identity", identity_json}, {"sample", SampleOrNull(latest)}, {"age_seconds", age}};
    return JsonResponse(Json{{"ranks", Json::array({std::move(self)})}});
  }
  if (path == "/api/v1/config") {
    HttpResponse r;
    r.body = config_body;
    return r;
  }
  if (path == "/" || path == "/index.html" || path.starts_with("/assets/")) {
    if (const DashboardAsset *asset = FindDashboardAsset(path)) {
      HttpResponse r;
      r.content_type = std::string(asset->content_type);
      r.body = std::string(asset->body);
      r.cache_control = "no-cache";
      return r;
    }
  }
  return Error(404, "not found: " + std::string(path) +
                        " (endpoints: /metrics, /api/v1/{snapshot,history,ranks,config}, /)");
}

Result<std::unique_ptr<Monitor>> Monitor::Create(const MonitorOptions &options) {
  const RankIdentity &id = options.identity;
  if (id.world_size < 1 || id.rank < 0 || id.rank >= id.world_size || id.local_rank < 0) {
    return InvalidArgument("metrics monitor: bad rank identity (rank " + std::to_string(id.rank) +
                           ", local rank " + std::to_string(id.local_rank) + ", world size " +
                           std::to_string(id.world_size) +
                           "): expected 0 <= rank < world size and local rank >= 0");
  }
  auto impl = std::make_unique<Impl>(options);

  Json config = Json::object();
  if (!options.config_json.empty()) {
    config = Json::parse(options.config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) {
      return InvalidArgument(
          "metrics monitor: the resolved config to serve at /api/v1/config "
          "is not valid JSON");
    }
    RedactTokens(&config);
  }
  impl->config_body = Dump(config);

  auto registry = MetricsRegistry::Create(id);
  if (!registry.ok()) return registry.status();
  impl->registry = std::move(registry).value();

  const MonitorConfig &mc = options.config;
  if (mc.log.enabled) {
    auto log = MetricsLog::Open(mc.log, id.rank);
    if (!log.ok()) return Status(log.status()).context("rank " + std::to_string(id.rank));
    impl->log = std::move(log).value();
  }

  if (mc.http.enabled) {
    HttpServerOptions http;
    http.host = mc.http.host;
    // Port 0 asks for any free port on every rank; otherwise rank r takes base + local rank.
    http.port = mc.http.port == 0 ? 0 : mc.http.port + static_cast<int>(id.local_rank);
    http.token = mc.http.token;
    if (const char *env = std::getenv("DSTRAIN_MONITOR_TOKEN"); env != nullptr && *env != '\0') {
      http.token = env;
    }
    const Impl *routes = impl.get();
    auto server = HttpServer::Start(
        http, [routes](const HttpRequest &request) { return routes->Route(request); });
    if (!server.ok()) {
      return Status(server.status()).context("rank " + std::to_string(id.rank));
    }
    impl->server = std::move(server).value();
  }
  return std::unique_ptr<Monitor>(new Monitor(std::move(impl)));
}

Monitor::Monitor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Monitor::~Monitor() {
  if (impl_) impl_->server.reset();  // stop serving before anything else goes
}

Status Monitor::OnStep(const StepSample &sample) {
  std::lock_guard<std::mutex> lock(impl_->step_mu);
  try {
    std::lock_guard<std::mutex> registry_lock(impl_->registry_mu);
    impl_->registry->Record(sample);
  } catch (const std::exception &e) {  // prometheus-cpp allocates series for new timer names
    return InternalError(std::string("metrics registry: cannot record step ") +
                         std::to_string(sample.step) + ": " + e.what());
  }
  impl_->history.Push(sample);
  if (impl_->log) return impl_->log->Append(sample);
  return Status::Ok();
}

int Monitor::http_port() const {
  return impl_->server ? impl_->server->port() : 0;
}

std::string Monitor::PrometheusText() const {
  return impl_->Exposition();
}

nlohmann::json Monitor::SnapshotJson() const {
  return impl_->Snapshot();
}

}  // namespace dst::metrics
