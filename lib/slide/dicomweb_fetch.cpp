// DicomwebSeries' frame requests (dicomweb_slide.hpp): fetch, all of a list's frames or an
// error, and fetch_each, which tells the frames that fail apart from the rest of their batch.
#include <algorithm>

#include "dicom_json.hpp"
#include "dicomweb_slide.hpp"

namespace mltool::slide {

// One batch of fetch_each: what its split has learnt so far.
struct DicomwebSeries::Split {
  int level = 0;
  std::size_t failures = 0;  // failed requests of the split
  std::size_t budget = 0;    // failures allowed before the rest fail unasked
  bool answered = false;     // a request of the batch was answered
  std::exception_ptr last;   // the last failure
};

std::vector<io::DicomwebFrame> DicomwebSeries::request(int level, const std::size_t* first,
                                                       std::size_t n, bool retry) const {
  std::vector<std::int64_t> numbers;
  for (std::size_t k = 0; k < n; ++k) numbers.push_back(static_cast<std::int64_t>(first[k]) + 1);
  const io::DicomHeader& h = this->level(level);
  return client_.frames(h.sop_instance, numbers, dicom_frame_bytes(h, client_.url().url), retry);
}

std::vector<io::DicomwebFrame> DicomwebSeries::fetch(
    int level, const std::vector<std::size_t>& indices) const {
  const std::size_t most = batch(level);
  std::vector<io::DicomwebFrame> out;
  for (std::size_t at = 0; at < indices.size();) {
    const std::size_t n = single_frames_ ? 1 : std::min(most, indices.size() - at);
    try {
      for (auto& f : request(level, indices.data() + at, n, true)) out.push_back(std::move(f));
    } catch (const io::DicomwebError& e) {
      // A server that takes one frame number per request answers a list with 400.
      if (n == 1 || e.status() != 400) throw;
      single_frames_ = true;
      continue;
    }
    at += n;
  }
  return out;
}

std::vector<DicomwebFetched> DicomwebSeries::fetch_each(
    int level, const std::vector<std::size_t>& indices) const {
  const std::size_t most = batch(level);
  std::vector<DicomwebFetched> out;
  out.reserve(indices.size());
  for (std::size_t at = 0; at < indices.size(); at += most) {
    const std::size_t n = std::min(most, indices.size() - at);
    Split split;
    split.level = level;
    for (std::size_t bits = n; bits; bits >>= 1) split.budget += 4;
    fetch_split(split, indices.data() + at, n, true, out);
  }
  return out;
}

void DicomwebSeries::fetch_split(Split& split, const std::size_t* first, std::size_t n, bool retry,
                                 std::vector<DicomwebFetched>& out) const {
  if (split.failures >= split.budget) {  // given up: the rest fail as the last request did
    for (std::size_t k = 0; k < n; ++k) out.push_back({{}, split.last});
    return;
  }
  if (n == 1 || !single_frames_) {
    try {
      for (auto& f : request(split.level, first, n, retry || (n == 1 && split.answered)))
        out.push_back({std::move(f), nullptr});
      split.answered = true;
      return;
    } catch (const io::DicomwebError& e) {
      if (n > 1 && e.status() == 400) {
        single_frames_ = true;  // a server that takes one frame number per request
      } else {
        ++split.failures;
        split.last = std::current_exception();
        if (n == 1) {
          out.push_back({{}, split.last});
          return;
        }
      }
    }
  }
  if (single_frames_) {
    for (std::size_t k = 0; k < n; ++k) fetch_split(split, first + k, 1, true, out);
    return;
  }
  const std::size_t half = n / 2;
  fetch_split(split, first, half, false, out);
  fetch_split(split, first + half, n - half, false, out);
}

}  // namespace mltool::slide
