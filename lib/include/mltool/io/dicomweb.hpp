// A slide served over DICOMweb: a series URL, http[s]://HOST[:PORT]/PATH/studies/STUDY/
// series/SERIES, its instances' metadata from WADO-RS (.../series/SERIES/metadata) and their
// frames from WADO-RS frame retrieval (.../instances/SOP/frames/1,2,3: several frames in one
// multipart/related response, in the transfer syntax the server stores them). HTTP through
// libcurl: each of `connections` handles keeps its connection open between requests, and
// speaks HTTP/2 where a TLS server offers it. Timeouts, 429 and 5xx are retried with
// exponential backoff, or after the wait a Retry-After asks (a bounded number of times, each
// logged); 401 and 403 end the run at once (DicomwebAuthError). Every request has a deadline
// (DicomwebOptions::timeout, from connecting to the last byte) and a size limit (a series'
// metadata: kDicomwebMetadataLimit; frames: what that many frames can take), counted both on the
// wire and after decompression; redirects are not followed.
//
// Credentials: the bearer token is read from a file or the environment, never from the command
// line, and appears in no message. It goes only to the origins of DicomwebOptions::origins (the
// slide URLs the user named, and --dicomweb-origin), and over plain http:// only to a loopback
// address; so do a URL's user name and password. A URL is written anywhere (records, logs,
// messages) only as redacted_url gives it.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mltool/util/error.hpp"

namespace mltool::io {

/// How a run talks to DICOMweb servers (tile's --dicomweb-* options).
struct DicomwebOptions {
  int connections = 4;     ///< concurrent requests (and open connections) per slide
  std::string token_file;  ///< a file holding the bearer token ("": MLTOOL_DICOMWEB_TOKEN, if set)
  bool insecure = false;   ///< skip TLS certificate and host verification
  int timeout = 60;  ///< seconds a request may take, first byte to last; the longest Retry-After
  int retries = 5;   ///< further tries of a request that timed out or got 429 or 5xx
  /// The origins (url_origin) the token may go to: --dicomweb-origin's, and those of the slide
  /// URLs the user named (allow_origin). A slide read from a store's record is named by nobody.
  std::vector<std::string> origins;
};

/// The most bytes a series' metadata answer may hold, on the wire or inflated: 256 MiB. A WSI
/// series' metadata is some kB an instance, and a TILED_SPARSE level's per-frame positions some
/// hundred bytes a frame: a million frames fit.
inline constexpr std::uint64_t kDicomwebMetadataLimit = std::uint64_t{256} << 20;

/// The most bytes an answer of `frames` frames of `frame_bytes` bytes each (uncompressed; 0:
/// not known, taken as 64 MiB) may hold: twice the pixels (no codec of DICOM doubles a frame)
/// and 4 kB of part headers a frame, plus 64 kB.
std::uint64_t dicomweb_frames_limit(std::size_t frames, std::uint64_t frame_bytes);

/// The origin of a URL: "scheme://host:port", scheme and host in lower case, the port always
/// given (80, 443 by default), no user name or password. UsageError naming `url` and `what`
/// (the option or record it came from) when it is no http:// or https:// URL with a host.
std::string url_origin(const std::string& url, const std::string& what);

/// Whether an origin's host is a loopback address: localhost, 127.0.0.0/8, ::1.
bool is_loopback_origin(const std::string& origin);

/// Adds the origin of `url`, a slide URL the user named, to `options.origins`; nothing for a
/// path that is no http[s] URL with a host.
void allow_origin(DicomwebOptions& options, const std::string& url);

/// `url` fit to write anywhere: without a user name and password, and every query parameter's
/// value "REDACTED". A path that is no URL comes back as it is.
std::string redacted_url(const std::string& url);

/// The seconds a Retry-After header value asks to wait: delta-seconds, or an HTTP-date
/// (IMF-fixdate, RFC 9110) less `now` (Unix seconds; 0 when it has passed). nullopt when the
/// value is neither.
std::optional<double> parse_retry_after(const std::string& value, std::int64_t now);

/// The environment variable that holds a bearer token when no token file is given.
inline constexpr const char* kDicomwebTokenVariable = "MLTOOL_DICOMWEB_TOKEN";

/// A parsed series URL.
struct DicomwebSeriesUrl {
  std::string url;       ///< as given, without a trailing '/' and without `userinfo`
  std::string base;      ///< the service root: what comes before /studies/
  std::string userinfo;  ///< "user:password" of the URL as given (percent-encoded), or ""
  std::string study;     ///< StudyInstanceUID
  std::string series;    ///< SeriesInstanceUID
};

/// Whether `path` is meant as a URL (starts with http:// or https://).
bool is_dicomweb_url(const std::string& path);

/// Whether `uid` is a DICOM UID (PS3.5 9.1): components of digits joined by single dots, at
/// most 64 characters. Every UID that goes into a request URL, the user's or the server's,
/// must be one: "..", "1.2/../x" or "%2e" would reach other paths of the server.
bool is_dicom_uid(const std::string& uid);

/// Parses a series URL (its user name and password apart). UsageError naming `url`
/// (redacted_url) and the expected form when it is not one (its study and series UIDs are not
/// DICOM UIDs, too).
DicomwebSeriesUrl parse_dicomweb_url(const std::string& url);

/// A 401 or 403 answer: the token is missing or wrong. Stops a run even under --keep-going.
class DicomwebAuthError : public InputError {
 public:
  explicit DicomwebAuthError(const std::string& m) : InputError(m) {}
};

/// A request that failed for good: its URL, the HTTP status (0: no answer), what happened.
class DicomwebError : public InputError {
 public:
  DicomwebError(const std::string& m, long status, std::string url)
      : InputError(m), status_(status), url_(std::move(url)) {}
  long status() const { return status_; }
  const std::string& url() const { return url_; }

 private:
  long status_;
  std::string url_;
};

/// A frame as the server sent it: its bytes and the transfer syntax it named.
struct DicomwebFrame {
  std::string bytes;
  std::string transfer_syntax;  ///< from the part's Content-Type, or the response's; "" if none
};

/// One series' client. Thread-safe: requests from several threads run side by side, at most
/// `connections` at a time.
class DicomwebClient {
 public:
  /// Reads the token (UsageError naming the file when it cannot be read or is empty).
  /// DicomwebAuthError, before any request, when a token is to go to an origin not in
  /// `options.origins` (naming --dicomweb-origin), or credentials over plain http:// to a host
  /// that is not a loopback address.
  DicomwebClient(DicomwebSeriesUrl url, const DicomwebOptions& options);
  ~DicomwebClient();
  DicomwebClient(const DicomwebClient&) = delete;
  DicomwebClient& operator=(const DicomwebClient&) = delete;

  const DicomwebSeriesUrl& url() const { return url_; }
  int connections() const;

  /// The series' metadata: a JSON array with one DICOM JSON dataset per instance. A 404 is a
  /// DicomwebError saying which UID the server does not know: the study, or the series of a
  /// study it has (or that the URL's root is no DICOMweb root).
  nlohmann::json metadata() const;

  /// Frames `numbers` (1-based) of instance `sop`, in that order, in one request, tried again
  /// on transient faults unless `retry` is false; a frame's pixels are `frame_bytes` (0: not
  /// known), which bounds the answer (dicomweb_frames_limit). DicomwebError naming the URL and
  /// the status when the request fails for good, the answer is larger than that, or it does
  /// not hold one part per frame; FormatError, and no request, when `sop` is not a DICOM UID
  /// (is_dicom_uid).
  std::vector<DicomwebFrame> frames(const std::string& sop,
                                    const std::vector<std::int64_t>& numbers,
                                    std::uint64_t frame_bytes, bool retry = true) const;

 private:
  struct Pool;
  std::string unknown_uid() const;
  void check_origin(const DicomwebOptions& options, bool token) const;
  DicomwebSeriesUrl url_;
  std::unique_ptr<Pool> pool_;
};

/// The parts of a multipart/related body whose Content-Type is `content_type` (which names
/// the boundary). FormatError naming `url` when there is no boundary or a part is malformed.
std::vector<DicomwebFrame> split_multipart(const std::string& body, const std::string& content_type,
                                           const std::string& url);

}  // namespace mltool::io
