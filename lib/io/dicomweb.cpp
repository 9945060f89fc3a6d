// The DICOMweb client (mltool/io/dicomweb.hpp): libcurl easy handles in a pool, one request per
// handle at a time, so a handle's open connection serves its next request.
#include "mltool/io/dicomweb.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"

namespace mltool::io {
namespace {

// The bearer token: --dicomweb-token-file's first line, else MLTOOL_DICOMWEB_TOKEN, else "".
std::string read_token(const DicomwebOptions& options) {
  std::string token;
  if (!options.token_file.empty()) {
    try {
      token = util::read_file(options.token_file);
    } catch (const Error& e) {
      throw UsageError(std::string("--dicomweb-token-file: ") + e.what());
    }
    token = token.substr(0, token.find_first_of("\r\n"));
    if (token.empty())
      throw UsageError("--dicomweb-token-file: " + options.token_file + " holds no token");
  } else if (const char* env = std::getenv(kDicomwebTokenVariable)) {
    token = env;
  }
  return token;
}

std::size_t append_body(char* data, std::size_t size, std::size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// Whether a request that got `code` / `status` may succeed if tried again.
bool transient(CURLcode code, long status) {
  if (code != CURLE_OK)
    return code == CURLE_OPERATION_TIMEDOUT || code == CURLE_COULDNT_CONNECT ||
           code == CURLE_RECV_ERROR || code == CURLE_SEND_ERROR || code == CURLE_GOT_NOTHING ||
           code == CURLE_PARTIAL_FILE || code == CURLE_HTTP2 || code == CURLE_HTTP2_STREAM;
  return status == 429 || status >= 500;
}

struct Answer {
  CURLcode code = CURLE_OK;
  long status = 0;
  long http_version = 0;  // CURL_HTTP_VERSION_1_1, CURL_HTTP_VERSION_2_0, ...
  std::string body, content_type, error;
};

std::string http_version_name(long v) {
  switch (v) {
    case CURL_HTTP_VERSION_1_0: return "HTTP/1.0";
    case CURL_HTTP_VERSION_1_1: return "HTTP/1.1";
    case CURL_HTTP_VERSION_2_0: return "HTTP/2";
    case CURL_HTTP_VERSION_3: return "HTTP/3";
    default: return "HTTP (version " + std::to_string(v) + ")";
  }
}

// The server of https `url` on the same port as http://, or "" when `url` is not https.
std::string as_plain_http(const std::string& url) {
  if (url.rfind("https://", 0) != 0) return "";
  const std::string rest = url.substr(8);
  const auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  const auto bracket = authority.rfind(']');  // an IPv6 address: [::1]:8042
  const auto colon = authority.rfind(':');
  if (colon == std::string::npos || (bracket != std::string::npos && colon < bracket))
    authority += ":443";
  return "http://" + authority + (slash == std::string::npos ? "/" : rest.substr(slash));
}

// Whether a failed TLS handshake with https `url` met a server that speaks plain HTTP there
// (OpenSSL says "wrong version number"): a request without TLS gets an HTTP answer. The probe
// carries no token and follows no redirect.
bool answers_plain_http(const std::string& url, int timeout) {
  const std::string plain = as_plain_http(url);
  if (plain.empty()) return false;
  CURL* h = curl_easy_init();
  if (!h) return false;
  std::string body;
  curl_easy_setopt(h, CURLOPT_URL, plain.c_str());
  curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, static_cast<long>(std::min(timeout, 10)));
  const CURLcode code = curl_easy_perform(h);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(h);
  return code == CURLE_OK && status >= 100;
}

// What a request that failed for good met, in words: the HTTP status or libcurl's error, and
// what to do where it is known.
std::string failure_text(const std::string& url, const Answer& a, int timeout) {
  std::string what = a.code == CURLE_OK ? "HTTP " + std::to_string(a.status) : a.error;
  if (a.code == CURLE_PEER_FAILED_VERIFICATION)
    what +=
        " (the server's TLS certificate is not trusted: add its CA to the system store, or "
        "give --dicomweb-insecure to skip verification)";
  if (a.code == CURLE_SSL_CONNECT_ERROR && answers_plain_http(url, timeout)) {
    const std::string plain = as_plain_http(url);
    const std::string server = plain.substr(0, plain.find('/', 7));
    what = "the server at " + server.substr(7) +
           " does not speak TLS (it answers plain HTTP there): give the URL with http:// (" +
           server + "/...), not https:// (TLS handshake: " + a.error + ")";
  }
  return what;
}

}  // namespace

// The handles, and the token and settings every request carries.
struct DicomwebClient::Pool {
  DicomwebOptions options;
  std::string authorization;  // "Authorization: Bearer ...", or ""
  std::mutex mutex;
  std::condition_variable returned;
  std::vector<CURL*> idle;
  std::vector<CURL*> all;
  std::atomic<bool> version_logged{false};  // the protocol of the first answer, at debug level

  ~Pool() {
    for (CURL* h : all) curl_easy_cleanup(h);
  }

  CURL* take() {
    std::unique_lock lock(mutex);
    returned.wait(lock, [&] { return !idle.empty(); });
    CURL* h = idle.back();
    idle.pop_back();
    return h;
  }
  void give(CURL* h) {
    {
      std::lock_guard lock(mutex);
      idle.push_back(h);
    }
    returned.notify_one();
  }

  Answer once(const std::string& url, const std::string& accept);
  Answer get(const std::string& url, const std::string& accept, int retries);
};

Answer DicomwebClient::Pool::once(const std::string& url, const std::string& accept) {
  CURL* h = take();
  Answer a;
  char error[CURL_ERROR_SIZE] = "";
  curl_slist* headers = curl_slist_append(nullptr, ("Accept: " + accept).c_str());
  if (!authorization.empty()) headers = curl_slist_append(headers, authorization.c_str());
  curl_easy_reset(h);  // keeps the connection cache
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &a.body);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS);
  curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");  // whatever the server compresses with
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, static_cast<long>(options.timeout));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);  // a stalled answer times out
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.timeout));
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, options.insecure ? 0L : 1L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, options.insecure ? 0L : 2L);
  a.code = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a.status);
  curl_easy_getinfo(h, CURLINFO_HTTP_VERSION, &a.http_version);
  const char* type = nullptr;
  if (curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &type) == CURLE_OK && type) a.content_type = type;
  a.error = error[0] ? error : curl_easy_strerror(a.code);
  curl_slist_free_all(headers);
  give(h);
  return a;
}

// `url` tried until it answers or fails for good: timeouts, dropped connections, 429 and 5xx
// again after 0.25, 0.5, 1, ... seconds (at most 8), `retries` times.
Answer DicomwebClient::Pool::get(const std::string& url, const std::string& accept, int retries) {
  for (int attempt = 0;; ++attempt) {
    Answer a = once(url, accept);
    if (a.code == CURLE_OK && (a.status == 401 || a.status == 403))
      throw DicomwebAuthError(
          url + ": HTTP " + std::to_string(a.status) +
          (authorization.empty() ? " (no token was sent)" : " (the token was refused)") +
          ": give a valid bearer token with --dicomweb-token-file FILE or "
          "the environment variable " +
          kDicomwebTokenVariable);
    if (a.code == CURLE_OK && a.status >= 200 && a.status < 300) {
      if (!version_logged.exchange(true))
        log::debug(url + ": answered over " + http_version_name(a.http_version));
      return a;
    }
    const std::string what = failure_text(url, a, options.timeout);
    if (!transient(a.code, a.status) || attempt >= retries)
      throw DicomwebError(
          url + ": " + what +
              (attempt > 0 ? " (after " + std::to_string(attempt + 1) + " tries)" : std::string()),
          a.code == CURLE_OK ? a.status : 0, url);
    const double wait = std::min(8.0, 0.25 * (1 << std::min(attempt, 5)));
    log::warn(url + ": " + what + "; trying again in " + std::to_string(wait).substr(0, 4) +
              " s (" + std::to_string(attempt + 1) + " of " + std::to_string(retries) +
              " retries)");
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
}

DicomwebClient::DicomwebClient(DicomwebSeriesUrl url, const DicomwebOptions& options)
    : url_(std::move(url)), pool_(std::make_unique<Pool>()) {
  static std::once_flag global;
  std::call_once(global, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (options.connections < 1) throw UsageError("--dicomweb-connections must be at least 1");
  pool_->options = options;
  const std::string token = read_token(options);
  if (!token.empty()) pool_->authorization = "Authorization: Bearer " + token;
  for (int i = 0; i < options.connections; ++i) {
    CURL* h = curl_easy_init();
    if (!h) throw ResourceError("libcurl: cannot make a handle");
    pool_->all.push_back(h);
    pool_->idle.push_back(h);
  }
}

DicomwebClient::~DicomwebClient() = default;

int DicomwebClient::connections() const { return static_cast<int>(pool_->all.size()); }

// A 404 for the series' metadata: which UID the server does not know, told by a QIDO-RS query
// of the study (a study it has answers with one match, one it lacks with none).
std::string DicomwebClient::unknown_uid() const {
  const std::string query = url_.base + "/studies?StudyInstanceUID=" + url_.study;
  Answer a;
  try {
    a = pool_->get(query, "application/dicom+json", pool_->options.retries);
  } catch (const DicomwebError& e) {
    return ", and " + query + " gets " +
           (e.status() ? "HTTP " + std::to_string(e.status()) : std::string("no answer")) +
           " too: is " + url_.base +
           " the server's DICOMweb root? (Orthanc's is http://HOST:8042/dicom-web; "
           "docs/tile.md#finding-a-series-url)";
  }
  const auto doc = nlohmann::json::parse(a.body, nullptr, false);
  const bool found = doc.is_array() && !doc.empty();
  if (!found)
    return ": the server knows no study " + url_.study + ": list its studies with curl -H " +
           "'Accept: application/dicom+json' " + url_.base +
           "/studies (docs/tile.md#finding-a-series-url)";
  return ": the server's study " + url_.study + " has no series " + url_.series +
         ": list the study's series with curl -H 'Accept: application/dicom+json' " + url_.base +
         "/studies/" + url_.study + "/series (docs/tile.md#finding-a-series-url)";
}

nlohmann::json DicomwebClient::metadata() const {
  const std::string url = url_.url + "/metadata";
  Answer a;
  try {
    a = pool_->get(url, "application/dicom+json", pool_->options.retries);
  } catch (const DicomwebError& e) {
    if (e.status() != 404) throw;
    throw DicomwebError(e.what() + unknown_uid(), 404, url);
  }
  auto doc = nlohmann::json::parse(a.body, nullptr, false);
  if (doc.is_discarded() || !doc.is_array() || doc.empty())
    throw FormatError(url + ": the answer is not a JSON array of instances' metadata");
  return doc;
}

std::vector<DicomwebFrame> DicomwebClient::frames(const std::string& sop,
                                                  const std::vector<std::int64_t>& numbers,
                                                  bool retry) const {
  // The UID goes into the path: one that is not a UID ("1.2/../../admin") would send the
  // user's authenticated request elsewhere on the server (libcurl collapses "../").
  if (!is_dicom_uid(sop))
    throw FormatError(url_.url + ": SOPInstanceUID '" + sop.substr(0, 80) +
                      "' is not a DICOM UID (digits and dots, at most 64 characters): no frames "
                      "are asked for it");
  std::string url = url_.url + "/instances/" + sop + "/frames/";
  for (std::size_t i = 0; i < numbers.size(); ++i)
    url += (i ? "," : "") + std::to_string(numbers[i]);
  // The frames as stored (transfer-syntax=*): JPEG baseline frames come back as they are, never
  // decoded and encoded again by the server.
  const Answer a =
      pool_->get(url, "multipart/related; type=\"application/octet-stream\"; transfer-syntax=*",
                 retry ? pool_->options.retries : 0);
  auto parts = split_multipart(a.body, a.content_type, url);
  if (parts.size() != numbers.size())
    throw DicomwebError(url + ": the answer holds " + std::to_string(parts.size()) +
                            " frames, not " + std::to_string(numbers.size()),
                        a.status, url);
  return parts;
}

}  // namespace mltool::io
