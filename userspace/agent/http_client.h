#pragma once
// A small HTTP client over libcurl for the MLflow sink (sink_mlflow.h): one
// connection kept alive between requests, bounded waits, and an outcome
// that tells a server that could not be reached from one that answered.

#include <memory>
#include <string>

namespace mlprof::agent {

struct HttpResponse {
  // 0: no answer (refused, unreachable, timed out, cut off); `error` says why.
  long status = 0;
  std::string body;
  std::string error;
};

class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // `url` is complete (base, path, query). A JSON body for POST; any bytes for PUT.
  HttpResponse get(const std::string& url);
  HttpResponse post_json(const std::string& url, const std::string& json);
  HttpResponse put(const std::string& url, const std::string& body,
                   const std::string& content_type);

  // `text` percent-encoded for a query value.
  std::string escape(const std::string& text);

 private:
  HttpResponse perform(const std::string& method, const std::string& url, const std::string* body,
                       const std::string& content_type);

  void* curl_;  // CURL*
};

}  // namespace mlprof::agent
