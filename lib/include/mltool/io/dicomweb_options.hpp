// The --dicomweb-* options, declared once for every job that reads slides or a coordinates
// store's tiles (tile and extract SLIDE through TileJob, info through InfoJob, predict, train):
// each job's table lists them with its own io::DicomwebOptions member. In io/, beside
// DicomwebOptions, so that train (which may not include slide/) lists them too.
#pragma once

#include <algorithm>

#include "mltool/io/dicomweb.hpp"
#include "mltool/util/options.hpp"

namespace mltool::io {

template <class J>
util::Option<J> dicomweb_connections_option(DicomwebOptions J::*web) {
  return util::option_at<J>(
             "--dicomweb-connections", [web](J& j) -> int& { return (j.*web).connections; },
             "Concurrent requests (open connections) per slide given as a DICOMweb series URL")
      .at_least(1)
      .at_most(64);
}

template <class J>
util::Option<J> dicomweb_token_file_option(DicomwebOptions J::*web) {
  return util::option_at<J>(
      "--dicomweb-token-file", [web](J& j) -> std::string& { return (j.*web).token_file; },
      "A file whose first line is the bearer token for DICOMweb servers (else the environment "
      "variable MLTOOL_DICOMWEB_TOKEN, if set)");
}

template <class J>
util::Option<J> dicomweb_insecure_option(DicomwebOptions J::*web) {
  return util::flag_at<J>(
      "--dicomweb-insecure", [web](J& j) -> bool& { return (j.*web).insecure; },
      "Do not verify DICOMweb servers' TLS certificates (system CA store) and host names");
}

template <class J>
util::Option<J> dicomweb_timeout_option(DicomwebOptions J::*web) {
  return util::option_at<J>(
             "--dicomweb-timeout", [web](J& j) -> int& { return (j.*web).timeout; },
             "Seconds a DICOMweb request may go without a byte, and may take in all (a request "
             "of frames: this for each 64 frames), before it is tried again; also the longest "
             "wait a server's Retry-After may ask")
      .at_least(1)
      .at_most(3600);
}

template <class J>
util::Option<J> dicomweb_origin_option(DicomwebOptions J::*web) {
  util::Option<J> o = util::custom<J>(
      "--dicomweb-origin", "ORIGIN",
      "A server (http[s]://HOST[:PORT]; repeatable) the bearer token may go to besides those of "
      "the slide URLs given: the servers of a tile store's slides",
      [web](J& j, const std::string& text) {
        const std::string origin = url_origin(text, "--dicomweb-origin");
        auto& all = (j.*web).origins;
        if (std::find(all.begin(), all.end(), origin) == all.end()) all.push_back(origin);
      },
      [web](const J& j) { return nlohmann::json((j.*web).origins); });
  o.many = true;
  return o;
}

/// The five --dicomweb-* options, in the order every command that reads DICOMweb slides lists
/// them (tile, info, view, train, predict).
template <class J>
util::Options<J> dicomweb_options(DicomwebOptions J::*web) {
  return {dicomweb_connections_option(web), dicomweb_token_file_option(web),
          dicomweb_insecure_option(web), dicomweb_timeout_option(web), dicomweb_origin_option(web)};
}

}  // namespace mltool::io
