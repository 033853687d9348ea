#include "net/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace tern::net {

namespace {

struct Upload {
  std::string_view data;
  size_t pos = 0;
};

size_t ReadBody(char* buf, size_t size, size_t n, void* user) {
  auto* u = static_cast<Upload*>(user);
  size_t len = std::min(size * n, u->data.size() - u->pos);
  std::memcpy(buf, u->data.data() + u->pos, len);
  u->pos += len;
  return len;
}

size_t WriteBody(char* ptr, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(ptr, size * n);
  return size * n;
}

size_t WriteHeader(char* ptr, size_t size, size_t n, void* user) {
  std::string line(ptr, size * n);
  auto colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
      value.pop_back();
    (*static_cast<std::map<std::string, std::string>*>(user))[name] = value;
  }
  return size * n;
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

Result<HttpResponse> HttpFetch(const HttpRequest& req) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* c = curl_easy_init();
  if (!c) return Status::Internal("curl_easy_init failed");
  HttpResponse resp;
  Upload up{req.body};
  curl_slist* headers = nullptr;
  for (const auto& h : req.headers) headers = curl_slist_append(headers, h.c_str());
  curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // we run in threads; no SIGALRM for DNS timeouts
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.connect_timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &resp.body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, WriteHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &resp.headers);
  if (req.method == "PUT" || req.method == "POST") {
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(c, CURLOPT_READDATA, &up);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    if (req.method == "POST") curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "POST");
    // Not "Expect:" (an empty header) to skip 100-continue: SigV4 signs custom headers, and a header that
    // is signed but never sent breaks the signature. A short wait costs little on large bodies.
    curl_easy_setopt(c, CURLOPT_EXPECT_100_TIMEOUT_MS, 300L);
  } else if (req.method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (req.method != "GET") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  if (!req.aws_sigv4.empty()) {
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, req.aws_sigv4.c_str());
    curl_easy_setopt(c, CURLOPT_USERPWD, req.userpwd.c_str());
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  char err[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
  CURLcode rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(c);
  if (rc != CURLE_OK) {
    return Status::Unavailable(
        fmt::format("{} {}: {}", req.method, req.url, err[0] ? err : curl_easy_strerror(rc)));
  }
  return resp;
}

}  // namespace tern::net
