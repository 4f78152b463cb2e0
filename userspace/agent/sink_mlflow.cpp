#include "agent/sink_mlflow.h"

#include <curl/curl.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <vector>

#include "agent/http_client.h"
#include "agent/json_parse.h"
#include "formats/json_read.h"
#include "util/file_io.h"

namespace mlprof::agent {

namespace {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

constexpr const char* kArtifactPath = "profile/profile.json";
constexpr const char* kArtifactsScheme = "mlflow-artifacts:";

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// A tag key MLflow accepts: letters, digits, _ - . / space; others become _.
std::string tag_key(const std::string& key) {
  std::string out = key;
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.' || c == '/' || c == ' ';
    if (!ok) c = '_';
  }
  return out.empty() ? "_" : out;
}

std::string utc(int64_t unix_ns) {
  const time_t t = static_cast<time_t>(unix_ns / 1'000'000'000);
  tm parts{};
  gmtime_r(&t, &parts);
  char text[32];
  strftime(text, sizeof text, "%Y-%m-%d %H:%M:%SZ", &parts);
  return text;
}

const std::string* label(const SpoolItem& item, const char* key) {
  const auto it = item.labels.find(key);
  return it == item.labels.end() || it->second.empty() ? nullptr : &it->second;
}

// "fraud/fraud-7d9f/model 2026-11-28 05:30:00Z", "python3 (pid 812) ...".
std::string run_name(const SpoolItem& item) {
  std::string who;
  if (const std::string* pod = label(item, "pod")) {
    if (const std::string* ns = label(item, "namespace")) who = *ns + "/";
    who += *pod;
    if (const std::string* c = label(item, "container")) who += "/" + *c;
  } else if (const std::string* process = label(item, "process")) {
    who = *process;
    if (const std::string* pid = label(item, "pid")) who += " (pid " + *pid + ")";
  } else if (const std::string* pid = label(item, "pid")) {
    who = "pid " + *pid;
  } else {
    who = "workload";
  }
  return who + " " + utc(item.period_start_unix_ns);
}

// What went wrong, in one line: MLflow's error code and message, else the body's start.
std::string cause(const HttpResponse& r, const std::string& what) {
  if (r.status == 0) return what + ": the tracking server did not answer: " + r.error;
  std::string detail;
  rapidjson::Document doc;
  if (parse_json_iterative(doc, r.body) && doc.IsObject()) {
    if (doc.HasMember("error_code") && doc["error_code"].IsString())
      detail = doc["error_code"].GetString();
    if (doc.HasMember("message") && doc["message"].IsString()) {
      detail += (detail.empty() ? "" : ": ") + std::string(doc["message"].GetString());
    }
  }
  if (detail.empty()) detail = r.body.substr(0, 200);
  for (char& c : detail) c = c == '\n' || c == '\r' || c == '\t' ? ' ' : c;  // one line for the log
  return what + ": HTTP " + std::to_string(r.status) + (detail.empty() ? "" : " " + detail);
}

// A server that did not answer, an error of its own, or rate limiting:
// the item is kept and tried again.
bool transient(const HttpResponse& r) {
  return r.status == 0 || r.status >= 500 || r.status == 429;
}
bool ok(const HttpResponse& r) { return r.status >= 200 && r.status < 300; }

class MlflowSink final : public Sink {
 public:
  MlflowSink(std::string base, std::string experiment, std::string shown, std::string identity)
      : base_(std::move(base)),
        experiment_(std::move(experiment)),
        shown_(std::move(shown)),
        identity_(std::move(identity)) {}

  Delivery deliver(const SpoolItem& item) override {
    auto data = read_file(item.path);
    if (!data)
      return {DeliveryStatus::kReject,
              "the spooled document cannot be read: " + data.error().message};
    std::string document = std::move(data.value());
    if (is_gzip(document)) {
      auto plain = gzip_decompress(document);
      if (!plain)
        return {DeliveryStatus::kReject,
                "the spooled document cannot be read: " + plain.error().message};
      document = std::move(plain.value());
    }
    auto profile = read_json_document(document);
    if (!profile)
      return {DeliveryStatus::kReject,
              "the spooled document is not a profile: " + profile.error().message};
    if (item.key.find('\'') != std::string::npos) {  // MLflow's search filter cannot quote it
      return {DeliveryStatus::kReject, "the item's key holds a quote: " + item.key};
    }

    if (experiment_id_.empty()) {
      if (Delivery failed = find_experiment(); failed.status != DeliveryStatus::kDelivered)
        return failed;
    }
    // A run with this key already: finished, it is delivered; otherwise a
    // delivery stopped midway, and is completed in that run.
    Run run;
    const HttpResponse found = client_.post_json(api("runs/search"), search_body(item.key));
    if (!ok(found)) {
      experiment_id_.clear();  // deleted or renamed since: looked up again next time
      return {DeliveryStatus::kRetry, cause(found, "searching the experiment's runs")};
    }
    if (!parse_run(found.body, "runs", &run)) {
      const HttpResponse created = client_.post_json(api("runs/create"), create_body(item));
      if (!ok(created) || !parse_run(created.body, "run", &run)) {
        return {DeliveryStatus::kRetry, cause(created, "creating the run")};
      }
    } else if (run.finished) {
      return {DeliveryStatus::kDelivered, "run " + run.id + " (already there)"};
    }

    if (!run.artifact_uri.starts_with(kArtifactsScheme)) {
      return {DeliveryStatus::kRetry,
              "the run's artifact location " + run.artifact_uri +
                  " is not the tracking server's (mlflow-artifacts:/): start `mlflow "
                  "server` serving artifacts (not --no-serve-artifacts)"};
    }
    // mlflow-artifacts:/1/<run>/artifacts or mlflow-artifacts://host/1/<run>/artifacts: the path
    // after the host.
    std::string path = run.artifact_uri.substr(std::string(kArtifactsScheme).size());
    if (path.starts_with("//")) path = path.substr(std::min(path.size(), path.find('/', 2)));
    while (!path.empty() && path.front() == '/') path.erase(0, 1);
    const HttpResponse uploaded =
        client_.put(base_ + "/api/2.0/mlflow-artifacts/artifacts/" + path + "/" + kArtifactPath,
                    document, "application/json");
    if (!ok(uploaded)) {
      return {transient(uploaded) ? DeliveryStatus::kRetry : DeliveryStatus::kReject,
              cause(uploaded, "uploading the profile to run " + run.id)};
    }
    const HttpResponse logged =
        client_.post_json(api("runs/log-batch"), metrics_body(run.id, profile.value(), item));
    if (!ok(logged)) {
      return {transient(logged) ? DeliveryStatus::kRetry : DeliveryStatus::kReject,
              cause(logged, "logging the metrics of run " + run.id)};
    }
    const HttpResponse ended = client_.post_json(api("runs/update"), finish_body(run.id, item));
    if (!ok(ended)) return {DeliveryStatus::kRetry, cause(ended, "ending run " + run.id)};
    return {DeliveryStatus::kDelivered, "run " + run.id};
  }

  std::string describe() const override { return shown_; }
  std::string identity() const override { return identity_; }

 private:
  struct Run {
    std::string id;
    std::string artifact_uri;
    bool finished = false;
  };

  std::string api(const char* method) const { return base_ + "/api/2.0/mlflow/" + method; }

  // The experiment's id, created when missing; kDelivered when known.
  Delivery find_experiment() {
    for (int attempt = 0; attempt < 2; ++attempt) {
      const HttpResponse got = client_.get(api("experiments/get-by-name") +
                                           "?experiment_name=" + client_.escape(experiment_));
      if (ok(got)) {
        rapidjson::Document doc;
        if (!parse_json_iterative(doc, got.body) || !doc.IsObject() ||
            !doc.HasMember("experiment") || !doc["experiment"].IsObject() ||
            !doc["experiment"].HasMember("experiment_id")) {
          return {DeliveryStatus::kRetry,
                  "the tracking server's answer to experiments/get-by-name has no experiment"};
        }
        const auto& e = doc["experiment"];
        if (e.HasMember("lifecycle_stage") && e["lifecycle_stage"].IsString() &&
            std::string(e["lifecycle_stage"].GetString()) == "deleted") {
          return {DeliveryStatus::kRetry,
                  "the experiment '" + experiment_ +
                      "' is deleted: restore it, or name another with ?experiment=NAME"};
        }
        experiment_id_ = e["experiment_id"].GetString();
        return {DeliveryStatus::kDelivered, ""};
      }
      if (got.status != 404)
        return {DeliveryStatus::kRetry, cause(got, "looking up experiment '" + experiment_ + "'")};
      rapidjson::StringBuffer out;
      JsonWriter w(out);
      w.StartObject();
      w.Key("name");
      w.String(experiment_.c_str());
      w.EndObject();
      const HttpResponse created = client_.post_json(api("experiments/create"), out.GetString());
      // Created, or created by another agent meanwhile: looked up again.
      if (!ok(created) && created.body.find("RESOURCE_ALREADY_EXISTS") == std::string::npos) {
        return {DeliveryStatus::kRetry,
                cause(created, "creating experiment '" + experiment_ + "'")};
      }
    }
    return {DeliveryStatus::kRetry,
            "experiment '" + experiment_ + "' was created but cannot be found"};
  }

  // The first run of a runs/search answer ("runs") or of runs/create ("run").
  static bool parse_run(const std::string& body, const char* member, Run* run) {
    rapidjson::Document doc;
    if (!parse_json_iterative(doc, body) || !doc.IsObject() || !doc.HasMember(member)) return false;
    const rapidjson::Value* r = &doc[member];
    if (r->IsArray()) {
      if (r->Empty()) return false;
      r = &(*r)[0];
    }
    if (!r->IsObject() || !r->HasMember("info") || !(*r)["info"].IsObject()) return false;
    const auto& info = (*r)["info"];
    if (!info.HasMember("run_id") || !info["run_id"].IsString()) return false;
    run->id = info["run_id"].GetString();
    run->artifact_uri = info.HasMember("artifact_uri") && info["artifact_uri"].IsString()
                            ? info["artifact_uri"].GetString()
                            : "";
    run->finished = info.HasMember("status") && info["status"].IsString() &&
                    std::string(info["status"].GetString()) == "FINISHED";
    return true;
  }

  std::string search_body(const std::string& key) const {
    rapidjson::StringBuffer out;
    JsonWriter w(out);
    w.StartObject();
    w.Key("experiment_ids");
    w.StartArray();
    w.String(experiment_id_.c_str());
    w.EndArray();
    w.Key("filter");
    w.String(("tags.`" + std::string(kMlflowKeyTag) + "` = '" + key + "'").c_str());
    w.Key("max_results");
    w.Int(1);
    w.EndObject();
    return out.GetString();
  }

  std::string create_body(const SpoolItem& item) const {
    rapidjson::StringBuffer out;
    JsonWriter w(out);
    w.StartObject();
    w.Key("experiment_id");
    w.String(experiment_id_.c_str());
    w.Key("run_name");
    w.String(run_name(item).c_str());
    w.Key("start_time");
    w.Int64(item.period_start_unix_ns / 1'000'000);
    w.Key("tags");
    w.StartArray();
    auto tag = [&](const std::string& k, const std::string& v) {
      w.StartObject();
      w.Key("key");
      w.String(k.c_str());
      w.Key("value");
      w.String(v.c_str());
      w.EndObject();
    };
    // The key is in the run from its creation, so a delivery cut short is found and completed.
    tag(kMlflowKeyTag, item.key);
    tag("mlflow.source.name", "mlprof-ebpf");
    tag("mlprof.period_start", utc(item.period_start_unix_ns));
    tag("mlprof.period_end", utc(item.period_end_unix_ns));
    for (const auto& [k, v] : item.labels) tag(tag_key(k), v);
    w.EndArray();
    w.EndObject();
    return out.GetString();
  }

  static std::string metrics_body(const std::string& run_id, const Profile& profile,
                                  const SpoolItem& item) {
    rapidjson::StringBuffer out;
    JsonWriter w(out);
    w.StartObject();
    w.Key("run_id");
    w.String(run_id.c_str());
    w.Key("metrics");
    w.StartArray();
    // One timestamp, the period's end: logged again after a cut-short
    // delivery, a metric is the same entry.
    for (const auto& [name, value] : mlflow_metrics(profile, item)) {
      w.StartObject();
      w.Key("key");
      w.String(name.c_str());
      w.Key("value");
      w.Double(value);
      w.Key("timestamp");
      w.Int64(item.period_end_unix_ns / 1'000'000);
      w.Key("step");
      w.Int(0);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    return out.GetString();
  }

  static std::string finish_body(const std::string& run_id, const SpoolItem& item) {
    rapidjson::StringBuffer out;
    JsonWriter w(out);
    w.StartObject();
    w.Key("run_id");
    w.String(run_id.c_str());
    w.Key("status");
    w.String("FINISHED");
    w.Key("end_time");
    w.Int64(item.period_end_unix_ns / 1'000'000);
    w.EndObject();
    return out.GetString();
  }

  std::string base_;        // scheme://host:port[/path], no trailing slash
  std::string experiment_;  // its name
  std::string shown_;
  std::string identity_;
  std::string experiment_id_;  // "" until looked up
  HttpClient client_;
};

// A quantile of sorted values: the sample of rank floor(q(n-1)) (path_stats's rule).
double quantile(const std::vector<int64_t>& sorted, double q) {
  return ms(sorted[static_cast<size_t>(std::floor(q * static_cast<double>(sorted.size() - 1)))]);
}

}  // namespace

std::map<std::string, double> mlflow_metrics(const Profile& profile, const SpoolItem& item) {
  std::map<std::string, double> out;
  out["profile/sessions"] = static_cast<double>(item.sessions);
  out["profile/spans"] = static_cast<double>(profile.spans.size());
  std::vector<int64_t> walls;
  walls.reserve(profile.roots.size());
  for (const int32_t r : profile.roots) walls.push_back(profile.spans[r].duration_ns());
  out["profile/roots/count"] = static_cast<double>(walls.size());
  if (!walls.empty()) {
    std::sort(walls.begin(), walls.end());
    int64_t total = 0;
    for (const int64_t w : walls) total += w;
    out["profile/roots/mean_ms"] = ms(total) / static_cast<double>(walls.size());
    out["profile/roots/p50_ms"] = quantile(walls, 0.50);
    out["profile/roots/p95_ms"] = quantile(walls, 0.95);
    out["profile/roots/p99_ms"] = quantile(walls, 0.99);
    out["profile/roots/max_ms"] = ms(walls.back());
  }
  if (profile.kernel.present && profile.kernel.spans.size() == profile.spans.size()) {
    int64_t on = 0, off = 0, blocked = 0, runq = 0;
    for (const int32_t r : profile.roots) {
      const SpanKernel& k = profile.kernel.spans[r];
      on += k.on_cpu_ns;
      off += k.off_cpu_ns;
      blocked += k.blocked_ns;
      runq += k.runq_ns;
    }
    out["profile/on_cpu_ms"] = ms(on);
    out["profile/off_cpu_ms"] = ms(off);
    out["profile/blocked_ms"] = ms(blocked);
    out["profile/runq_ms"] = ms(runq);
  }
  return out;
}

Result<std::unique_ptr<Sink>> open_mlflow_sink(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return Error{Error::Kind::kUnsupported, 0, "--sink " + url + ": " + why};
  };
  CURLU* u = curl_url();
  if (u == nullptr) return bad("libcurl could not start");
  std::unique_ptr<CURLU, void (*)(CURLU*)> owned(u, curl_url_cleanup);
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) return bad("not a URL");
  auto part = [&](CURLUPart which, unsigned flags = 0) -> std::string {
    char* text = nullptr;
    if (curl_url_get(u, which, &text, flags) != CURLUE_OK || text == nullptr) return {};
    std::string out = text;
    curl_free(text);
    return out;
  };
  const std::string scheme = part(CURLUPART_SCHEME);
  if (scheme != "http" && scheme != "https")
    return bad("an MLflow tracking server's URL is http:// or https://");
  std::string experiment = kDefaultMlflowExperiment;
  const std::string query = part(CURLUPART_QUERY);
  size_t at = 0;
  while (at < query.size()) {
    const size_t end = std::min(query.find('&', at), query.size());
    const std::string pair = query.substr(at, end - at);
    at = end + 1;
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != "experiment" || eq == std::string::npos || eq + 1 == pair.size()) {
      return bad("the only query it takes is ?experiment=NAME, not '" + pair + "'");
    }
    int length = 0;
    char* name = curl_easy_unescape(nullptr, pair.c_str() + eq + 1,
                                    static_cast<int>(pair.size() - eq - 1), &length);
    experiment.assign(name, static_cast<size_t>(length));
    curl_free(name);
    for (char& c : experiment) c = c == '+' ? ' ' : c;
  }
  // The base the REST paths go under: no query, no fragment, no trailing slash.
  curl_url_set(u, CURLUPART_QUERY, nullptr, 0);
  curl_url_set(u, CURLUPART_FRAGMENT, nullptr, 0);
  std::string base = part(CURLUPART_URL);
  while (!base.empty() && base.back() == '/') base.pop_back();
  // Shown without a password.
  curl_url_set(u, CURLUPART_PASSWORD, nullptr, 0);
  std::string shown = part(CURLUPART_URL);
  while (!shown.empty() && shown.back() == '/') shown.pop_back();
  shown += " (experiment " + experiment + ")";
  // The identity: no user, no password, the port always, the host in lower case.
  std::string host = part(CURLUPART_HOST);
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string path = part(CURLUPART_PATH);
  while (!path.empty() && path.back() == '/') path.pop_back();
  const std::string identity = "mlflow:" + scheme + "://" + host + ":" +
                               part(CURLUPART_PORT, CURLU_DEFAULT_PORT) + path +
                               "?experiment=" + experiment;
  return std::unique_ptr<Sink>(std::make_unique<MlflowSink>(std::move(base), std::move(experiment),
                                                            std::move(shown), identity));
}

}  // namespace mlprof::agent
