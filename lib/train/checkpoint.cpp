#include "mltool/train/checkpoint.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;
constexpr const char* kFormat = "mltool.checkpoint";
constexpr int kVersion = 1;

at::Generator generator_for(const torch::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device)
                          : at::detail::getDefaultCPUGenerator();
}

torch::Tensor rng_state(const torch::Device& device) {
  auto gen = generator_for(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const torch::Device& device, const torch::Tensor& state) {
  auto gen = generator_for(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

json LoopState::to_json() const {
  return {{"format", kFormat},
          {"format_version", kVersion},
          {"epoch", epoch},
          {"epoch_step", epoch_step},
          {"step", step},
          {"window_loss", window_loss},
          {"window_count", window_count},
          {"epoch_loss", epoch_loss},
          {"epoch_count", epoch_count},
          {"best", best ? json(*best) : json()},
          {"best_epoch", best_epoch},
          {"bad_epochs", bad_epochs},
          {"metrics_bytes", metrics_bytes},
          {"status", status == RunStatus::running ? "" : to_string(status)},  // "": training
          {"oom_micro_batches", oom_micro_batches},
          {"oom_sections", oom_sections}};
}

LoopState LoopState::from_json(const json& doc, const std::string& where) {
  try {
    if (doc.at("format") != kFormat || doc.at("format_version").get<int>() > kVersion)
      throw FormatError(at_file(where, "not a checkpoint of this version of mltool"));
    LoopState s;
    s.epoch = doc.at("epoch").get<int>();
    s.epoch_step = doc.at("epoch_step").get<std::int64_t>();
    s.step = doc.at("step").get<std::int64_t>();
    s.window_loss = doc.at("window_loss").get<double>();
    s.window_count = doc.at("window_count").get<std::int64_t>();
    s.epoch_loss = doc.at("epoch_loss").get<double>();
    s.epoch_count = doc.at("epoch_count").get<std::int64_t>();
    if (!doc.at("best").is_null()) s.best = doc["best"].get<double>();
    s.best_epoch = doc.at("best_epoch").get<int>();
    s.bad_epochs = doc.at("bad_epochs").get<int>();
    s.metrics_bytes = doc.at("metrics_bytes").get<std::uint64_t>();
    const auto status = doc.at("status").get<std::string>();
    s.status = status.empty() ? RunStatus::running
                              : util::parse_enum(kRunStatuses, status, "checkpoint status");
    s.oom_micro_batches = doc.value("oom_micro_batches", std::int64_t{0});  // absent before 0.x
    s.oom_sections = doc.value("oom_sections", std::int64_t{0});
    return s;
  } catch (const json::exception& e) {
    throw FormatError(at_file(where, std::string("checkpoint state: ") + e.what()));
  }
}

void save_checkpoint(const std::string& path, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, const LoopState& state,
                     const torch::Device& device) {
  torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
  model.save(model_archive);
  optimizer.save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("rng_cpu", rng_state(torch::kCPU));
  if (device.is_cuda()) archive.write("rng_cuda", rng_state(device));
  archive.write("state", c10::IValue(state.to_json().dump()));
  util::AtomicFile file(path);
  archive.save_to([&](const void* data, std::size_t size) -> std::size_t {
    file.write(data, size);
    return size;
  });
  file.commit();
}

LoopState load_checkpoint(const std::string& path, torch::nn::Module& model,
                          torch::optim::Optimizer& optimizer, const torch::Device& device) {
  const std::string bytes = util::read_file(path);
  torch::serialize::InputArchive archive, model_archive, optimizer_archive;
  c10::IValue state;
  torch::Tensor cpu_state, cuda_state;
  try {
    archive.load_from(bytes.data(), bytes.size(), device);
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    archive.read("rng_cpu", cpu_state);
    archive.read("state", state);
    if (device.is_cuda() && !archive.try_read("rng_cuda", cuda_state))
      throw FormatError(
          at_file(path, "was written by a run on the CPU; resume it with --device cpu"));
    model.load(model_archive);
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& e) {
    throw FormatError(at_file(
        path, std::string("not a checkpoint of this model: ") + e.what_without_backtrace()));
  }
  const auto loop = LoopState::from_json(json::parse(state.toStringRef(), nullptr, false), path);
  set_rng_state(torch::kCPU, cpu_state.cpu());
  if (cuda_state.defined()) set_rng_state(device, cuda_state.cpu());
  return loop;
}

}  // namespace mltool::train
