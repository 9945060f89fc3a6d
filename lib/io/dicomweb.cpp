// The DICOMweb client (mltool/io/dicomweb.hpp): libcurl easy handles in a pool, one request per
// handle at a time, so a handle's open connection serves its next request.
#include "mltool/io/dicomweb.hpp"

#include <curl/curl.h>
#include <strings.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
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

// An answer's body as it arrives, cut off at `limit` bytes: the write callback sees the
// inflated bytes (Accept-Encoding), the progress callback those on the wire (and the
// Content-Length the server announced). A short count or a non-zero return aborts the
// transfer; `over` then tells the abort from a failure of the connection.
struct Sink {
  std::string body;
  std::uint64_t limit = 0;
  bool over = false;
  std::string retry_after;  // the Retry-After header of the (last) answer
};

std::size_t sink_body(char* data, std::size_t size, std::size_t n, void* out) {
  auto* sink = static_cast<Sink*>(out);
  if (sink->body.size() + size * n > sink->limit) {
    sink->over = true;
    return 0;  // CURLE_WRITE_ERROR
  }
  sink->body.append(data, size * n);
  return size * n;
}

int sink_progress(void* out, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* sink = static_cast<Sink*>(out);
  if (static_cast<std::uint64_t>(std::max(total, now)) > sink->limit) sink->over = true;
  return sink->over ? 1 : 0;  // CURLE_ABORTED_BY_CALLBACK
}

std::size_t sink_header(char* data, std::size_t size, std::size_t n, void* out) {
  const std::string line(data, size * n);
  constexpr std::size_t kName = 12;  // "retry-after:"
  auto* sink = static_cast<Sink*>(out);
  if (line.rfind("HTTP/", 0) == 0) sink->retry_after.clear();  // a new answer (after a 100)
  if (line.size() > kName && strncasecmp(line.c_str(), "retry-after:", kName) == 0) {
    const auto first = line.find_first_not_of(" \t", kName);
    const auto last = line.find_last_not_of(" \t\r\n");
    sink->retry_after = first == std::string::npos || last < first
                            ? std::string()
                            : line.substr(first, last - first + 1);
  }
  return size * n;
}

std::string mib_text(std::uint64_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
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
  bool over = false;      // larger than the request's limit: aborted
  std::string body, content_type, error, retry_after, location;
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

// The deadline of a request of `frames` frames: --dicomweb-timeout for each 64 of them, so a
// large batch on a slow link may take its time while a trickle still ends (a stall ends sooner:
// no byte for --dicomweb-timeout seconds).
long dicomweb_frames_deadline(std::size_t frames, int timeout) {
  return static_cast<long>(timeout) *
         static_cast<long>(std::max<std::size_t>(1, (frames + 63) / 64));
}

// What a request that failed for good met, in words: the HTTP status or libcurl's error, and
// what to do where it is known.
std::string failure_text(const std::string& url, const Answer& a, int timeout, long deadline) {
  std::string what = a.code == CURLE_OK ? "HTTP " + std::to_string(a.status) : a.error;
  if (a.code == CURLE_OPERATION_TIMEDOUT)
    what += " (no byte for --dicomweb-timeout " + std::to_string(timeout) +
            " s, or past the request's deadline of " + std::to_string(deadline) + " s)";
  if (a.code == CURLE_OK && a.status >= 300 && a.status < 400)
    what += " (a redirect" + (a.location.empty() ? "" : " to " + redacted_url(a.location)) +
            ", not followed: no token or password goes where a server sends it; give the "
            "series URL it points to)";
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

  std::string userinfo;  // "user:password" of the series URL, or ""

  void prepare(CURL* h, const std::string& url, curl_slist* headers, Sink& sink, char* error,
               long deadline) const;
  Answer once(const std::string& url, const std::string& accept, std::uint64_t limit,
              long deadline);
  double wait_before_retry(const std::string& url, const Answer& a, int attempt) const;
  Answer get(const std::string& url, const std::string& accept, int retries, std::uint64_t limit,
             long deadline);
};

// Sets `h` for one GET of `url` into `sink`: `deadline` seconds in all, no more than
// --dicomweb-timeout without a byte, and the options' TLS settings.
void DicomwebClient::Pool::prepare(CURL* h, const std::string& url, curl_slist* headers, Sink& sink,
                                   char* error, long deadline) const {
  curl_easy_reset(h);  // keeps the connection cache
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  if (!userinfo.empty()) curl_easy_setopt(h, CURLOPT_USERPWD, userinfo.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);  // credentials go nowhere a server sends them
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, sink_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &sink);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, sink_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &sink);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS);
  // Whatever the server compresses with: sink_body counts the inflated bytes against the limit.
  curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, static_cast<long>(options.timeout));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);  // a stalled answer times out at once
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.timeout));
  curl_easy_setopt(h, CURLOPT_TIMEOUT, deadline);  // and a trickle at its deadline
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, options.insecure ? 0L : 1L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, options.insecure ? 0L : 2L);
}

Answer DicomwebClient::Pool::once(const std::string& url, const std::string& accept,
                                  std::uint64_t limit, long deadline) {
  CURL* h = take();
  Answer a;
  Sink sink;
  sink.limit = limit;
  char error[CURL_ERROR_SIZE] = "";
  curl_slist* headers = curl_slist_append(nullptr, ("Accept: " + accept).c_str());
  if (!authorization.empty()) headers = curl_slist_append(headers, authorization.c_str());
  prepare(h, url, headers, sink, error, deadline);
  a.code = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a.status);
  curl_easy_getinfo(h, CURLINFO_HTTP_VERSION, &a.http_version);
  const char* type = nullptr;
  if (curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &type) == CURLE_OK && type) a.content_type = type;
  const char* location = nullptr;
  if (curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &location) == CURLE_OK && location)
    a.location = location;
  a.error = error[0] ? error : curl_easy_strerror(a.code);
  curl_slist_free_all(headers);
  give(h);
  a.over = sink.over;
  a.body = std::move(sink.body);
  a.retry_after = std::move(sink.retry_after);
  return a;
}

// How long to wait before try `attempt` + 2 of `url`: 0.25, 0.5, 1, ... seconds (at most 8),
// or what the answer's Retry-After asks if that is longer. DicomwebError naming the wait when
// it asks more than --dicomweb-timeout.
double DicomwebClient::Pool::wait_before_retry(const std::string& url, const Answer& a,
                                               int attempt) const {
  const double backoff = std::min(8.0, 0.25 * (1 << std::min(attempt, 5)));
  if (a.retry_after.empty()) return backoff;
  const auto asked =
      parse_retry_after(a.retry_after, static_cast<std::int64_t>(std::time(nullptr)));
  if (!asked) {
    log::warn(url + ": Retry-After '" + a.retry_after.substr(0, 64) +
              "' is neither seconds nor an HTTP-date; waiting as if it were not there");
    return backoff;
  }
  if (*asked > options.timeout)
    throw DicomwebError(url + ": HTTP " + std::to_string(a.status) + " asks to try again after " +
                            std::to_string(static_cast<long long>(*asked)) +
                            " s (Retry-After), longer than the " + std::to_string(options.timeout) +
                            " s mltool waits at most (--dicomweb-timeout)",
                        a.status, url);
  return std::max(backoff, *asked);
}

// `url` tried until it answers or fails for good: timeouts, dropped connections, 429 and 5xx
// again after wait_before_retry, `retries` times. An answer over `limit` bytes fails at once.
Answer DicomwebClient::Pool::get(const std::string& url, const std::string& accept, int retries,
                                 std::uint64_t limit, long deadline) {
  for (int attempt = 0;; ++attempt) {
    Answer a = once(url, accept, limit, deadline);
    if (a.over)
      throw DicomwebError(url + ": the answer is larger than " + mib_text(limit) +
                              ", the most this request can hold (on the wire or inflated): "
                              "the server does not answer as a DICOMweb server does",
                          a.status, url);
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
    const std::string what = failure_text(url, a, options.timeout, deadline);
    if (!transient(a.code, a.status) || attempt >= retries)
      throw DicomwebError(
          url + ": " + what +
              (attempt > 0 ? " (after " + std::to_string(attempt + 1) + " tries)" : std::string()),
          a.code == CURLE_OK ? a.status : 0, url);
    const double wait = wait_before_retry(url, a, attempt);
    log::warn(url + ": " + what + "; trying again in " + std::to_string(wait).substr(0, 4) + " s" +
              (a.retry_after.empty()
                   ? ""
                   : " (the server's Retry-After: " + a.retry_after.substr(0, 40) + ")") +
              " (" + std::to_string(attempt + 1) + " of " + std::to_string(retries) + " retries)");
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
}

// DicomwebAuthError when the client's credentials may not go to its URL's origin.
void DicomwebClient::check_origin(const DicomwebOptions& options, bool token) const {
  const std::string origin = url_origin(url_.url, "the slide");
  const bool plain = origin.rfind("http://", 0) == 0;
  if ((token || !url_.userinfo.empty()) && plain && !is_loopback_origin(origin))
    throw DicomwebAuthError(
        url_.url + ": " + (token ? "the bearer token" : "the URL's user name and password") +
        " would go over plain http:// to " + origin +
        ", which is no loopback address: give the server's https:// URL" +
        (token
             ? ", or no token (--dicomweb-token-file, " + std::string(kDicomwebTokenVariable) + ")"
             : std::string()));
  if (token &&
      std::find(options.origins.begin(), options.origins.end(), origin) == options.origins.end())
    throw DicomwebAuthError(
        url_.url +
        ": the bearer token goes only to the origins of the slide URLs given on the "
        "command line and to those of --dicomweb-origin; " +
        origin + " is neither: give --dicomweb-origin " + origin +
        " if that server is to have the token");
}

DicomwebClient::DicomwebClient(DicomwebSeriesUrl url, const DicomwebOptions& options)
    : url_(std::move(url)), pool_(std::make_unique<Pool>()) {
  static std::once_flag global;
  std::call_once(global, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (options.connections < 1) throw UsageError("--dicomweb-connections must be at least 1");
  pool_->options = options;
  pool_->userinfo = url_.userinfo;
  const std::string token = read_token(options);
  check_origin(options, !token.empty());
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
    a = pool_->get(query, "application/dicom+json", pool_->options.retries, kDicomwebMetadataLimit,
                   pool_->options.timeout);
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
    a = pool_->get(url, "application/dicom+json", pool_->options.retries, kDicomwebMetadataLimit,
                   pool_->options.timeout);
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
                                                  std::uint64_t frame_bytes, bool retry) const {
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
  const Answer a = pool_->get(
      url, "multipart/related; type=\"application/octet-stream\"; transfer-syntax=*",
      retry ? pool_->options.retries : 0, dicomweb_frames_limit(numbers.size(), frame_bytes),
      dicomweb_frames_deadline(numbers.size(), pool_->options.timeout));
  auto parts = split_multipart(a.body, a.content_type, url);
  if (parts.size() != numbers.size())
    throw DicomwebError(url + ": the answer holds " + std::to_string(parts.size()) +
                            " frames, not " + std::to_string(numbers.size()),
                        a.status, url);
  return parts;
}

}  // namespace mltool::io
