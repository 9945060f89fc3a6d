// The --dicomweb-* options, declared once for every job that reads slides (tile and extract
// SLIDE through TileJob, info through InfoJob): each job's table lists them with its own
// io::DicomwebOptions member.
#pragma once

#include "mltool/io/dicomweb.hpp"
#include "mltool/util/options.hpp"

namespace mltool::slide {

template <class J>
util::Option<J> dicomweb_connections_option(io::DicomwebOptions J::*web) {
  return util::option_at<J>(
             "--dicomweb-connections", [web](J& j) -> int& { return (j.*web).connections; },
             "Concurrent requests (open connections) per slide given as a DICOMweb series URL")
      .at_least(1)
      .at_most(64);
}

template <class J>
util::Option<J> dicomweb_token_file_option(io::DicomwebOptions J::*web) {
  return util::option_at<J>(
      "--dicomweb-token-file", [web](J& j) -> std::string& { return (j.*web).token_file; },
      "A file whose first line is the bearer token for DICOMweb servers (else the environment "
      "variable MLTOOL_DICOMWEB_TOKEN, if set)");
}

template <class J>
util::Option<J> dicomweb_insecure_option(io::DicomwebOptions J::*web) {
  return util::flag_at<J>(
      "--dicomweb-insecure", [web](J& j) -> bool& { return (j.*web).insecure; },
      "Do not verify DICOMweb servers' TLS certificates (system CA store) and host names");
}

template <class J>
util::Option<J> dicomweb_timeout_option(io::DicomwebOptions J::*web) {
  return util::option_at<J>(
             "--dicomweb-timeout", [web](J& j) -> int& { return (j.*web).timeout; },
             "Seconds a DICOMweb request may wait for a byte before it is tried again")
      .at_least(1)
      .at_most(3600);
}

}  // namespace mltool::slide
