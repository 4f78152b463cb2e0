#include "agent/http_client.h"

#include <curl/curl.h>

#include <mutex>

namespace mlprof::agent {

namespace {

// Seconds to connect, and for a whole request (an artifact of a busy
// period is a few MB).
constexpr long kConnectTimeoutS = 5;
constexpr long kRequestTimeoutS = 120;

size_t append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

}  // namespace

HttpClient::HttpClient() {
  static std::once_flag global;  // curl_global_init is not thread-safe: once, before any handle
  std::call_once(global, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

std::string HttpClient::escape(const std::string& text) {
  char* escaped =
      curl_easy_escape(static_cast<CURL*>(curl_), text.data(), static_cast<int>(text.size()));
  std::string out = escaped != nullptr ? escaped : "";
  curl_free(escaped);
  return out;
}

HttpResponse HttpClient::get(const std::string& url) { return perform("GET", url, nullptr, ""); }

HttpResponse HttpClient::post_json(const std::string& url, const std::string& json) {
  return perform("POST", url, &json, "application/json");
}

HttpResponse HttpClient::put(const std::string& url, const std::string& body,
                             const std::string& content_type) {
  return perform("PUT", url, &body, content_type);
}

HttpResponse HttpClient::perform(const std::string& method, const std::string& url,
                                 const std::string* body, const std::string& content_type) {
  HttpResponse out;
  auto* curl = static_cast<CURL*>(curl_);
  if (curl == nullptr) {
    out.error = "libcurl could not start";
    return out;
  }
  curl_easy_reset(curl);  // keeps the connection, forgets the last request's options
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // the spool's thread: no SIGALRM for timeouts
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, kConnectTimeoutS);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, kRequestTimeoutS);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &out.body);
  curl_slist* headers = nullptr;
  if (body != nullptr) {
    headers = curl_slist_append(headers, ("Content-Type: " + content_type).c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
    if (method != "POST") curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  headers = curl_slist_append(headers, "Accept: application/json");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  const CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    out.error = error[0] != '\0' ? error : curl_easy_strerror(rc);
    out.body.clear();
    return out;
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &out.status);
  return out;
}

}  // namespace mlprof::agent
