// --profile: LibTorch's Kineto profiler over a window of steps (mltool/util/profile.hpp).
#include "mltool/util/profile.hpp"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"

namespace mltool::util {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

struct StepProfiler::Impl {
  ProfileRequest request;
  bool cuda = false;
  std::string unit;
  std::int64_t next = 0;  // the index of the step that begins at the next step()
  bool recording = false, written = false;
  std::optional<at::RecordFunction> range;  // the current step's "ProfilerStep#N"

  std::set<impl::ActivityType> activities() const {
    std::set<impl::ActivityType> a{impl::ActivityType::CPU};
    if (cuda) a.insert(impl::ActivityType::CUDA);
    return a;
  }
  static impl::ProfilerConfig config() {
    return impl::ProfilerConfig(impl::ProfilerState::KINETO, /*report_input_shapes=*/true,
                                /*profile_memory=*/true);
  }
  void start() {
    prof::prepareProfiler(config(), activities());
    prof::enableProfiler(config(), activities());
    recording = true;
  }
  void begin_range(std::int64_t index) {
    range.emplace(at::RecordScope::USER_SCOPE);
    if (range->isActive()) range->before("ProfilerStep#" + std::to_string(index));
  }
  std::string stop() {
    range.reset();
    const auto result = prof::disableProfiler();
    recording = false;
    written = true;
    make_directories(parent_directory(request.file));
    const std::string temp = request.file + ".partial-" + std::to_string(::getpid());
    result->save(temp);
    if (std::rename(temp.c_str(), request.file.c_str()) != 0) {
      std::remove(temp.c_str());
      throw ResourceError(request.file + ": cannot write the --profile trace");
    }
    const std::int64_t recorded = std::min(next, request.skip + request.steps) - request.skip;
    log::info("--profile: " + std::to_string(recorded) + " " + unit + "(s) after " +
              std::to_string(request.skip) + " written to " + request.file);
    return request.file;
  }
};

StepProfiler::StepProfiler(ProfileRequest request, bool cuda, std::string unit)
    : impl_(std::make_unique<Impl>()) {
  impl_->request = std::move(request);
  impl_->cuda = cuda;
  impl_->unit = std::move(unit);
}

StepProfiler::~StepProfiler() {
  try {
    finish();
  } catch (const std::exception& e) {
    log::warn(std::string("--profile: ") + e.what());
  }
}

void StepProfiler::end_step() { impl_->range.reset(); }

void StepProfiler::begin_step() {
  Impl& p = *impl_;
  if (p.request.file.empty() || p.written) return;
  const std::int64_t index = p.next++;
  if (index == p.request.skip + p.request.steps) {
    p.stop();
    return;
  }
  if (index == p.request.skip) p.start();
  if (p.recording) {
    p.range.reset();
    p.begin_range(index);
  }
}

std::string StepProfiler::finish() {
  Impl& p = *impl_;
  if (p.request.file.empty() || p.written) return "";
  if (p.recording) return p.stop();
  p.written = true;
  log::warn("--profile: the run had " + std::to_string(p.next) + " " + p.unit +
            "(s), not more than --profile-skip " + std::to_string(p.request.skip) +
            "; nothing was recorded (lower --profile-skip)");
  return "";
}

}  // namespace mltool::util
