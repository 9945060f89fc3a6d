// features::open_segmenter (segmenter.hpp): a TorchScript segmentation model classifying
// windows of a slide. Pixels go to the device as bytes and are scaled there; only the arg-max
// classes (one byte a pixel) come back. A batch that runs out of memory is split in two and
// retried, down to one window.
#include "mltool/features/segmenter.hpp"

#include <caffe2/serialize/inline_container.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <fstream>

#include "mltool/features/extractor.hpp"
#include "mltool/util/device.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/oom.hpp"

namespace mltool::features {
namespace {

std::string contract_text(const std::string& path) {
  const std::string record = std::string("extra/") + slide::kSegmenterContractFile;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    if (reader.hasRecord(record)) {
      const auto [data, size] = reader.getRecord(record);
      return std::string(static_cast<const char*>(data.get()), size);
    }
  } catch (const c10::Error& e) {
    throw InputError(at_file(path,
                             "not a TorchScript archive (--tissue takes otsu, none or a "
                             "TorchScript segmenter): " +
                                 torch_error_cause(e)));
  }
  throw InputError(at_file(
      path, std::string("has no ") + slide::kSegmenterContractFile +
                " inside, so nothing says what its classes are: export it with "
                "scripts/encoders.py export, or save it with torch.jit.save(..., _extra_files="
                "{'mltool.json': ...}) (docs/tile.md#the-segmenter-contract)"));
}

class TorchSegmenter final : public slide::Segmenter {
 public:
  TorchSegmenter(const std::string& path, torch::Device device)
      : path_(path),
        device_(device),
        contract_(slide::parse_segmenter_contract(contract_text(path), path)) {
    try {
      module_ = torch::jit::load(path_, device_);
    } catch (const c10::Error& e) {
      throw InputError(at_file(path_, "not a TorchScript model: " + torch_error_cause(e)));
    }
    module_.eval();
    check_output();
  }

  const slide::SegmenterContract& contract() const override { return contract_; }
  int batch() const override { return device_.is_cuda() ? 32 : 4; }

  void classify(const std::uint8_t* rgb, int n, std::uint8_t* classes) override {
    const std::int64_t s = contract_.input_size;
    try {
      if (util::debug_oom_listed(++calls_) && n > 1)
        util::throw_debug_oom("window batch " + std::to_string(calls_));
      const torch::Tensor out = run(rgb, n);
      std::memcpy(classes, out.data_ptr<std::uint8_t>(), static_cast<std::size_t>(n * s * s));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      if (!util::is_out_of_memory(e))
        throw ResourceError(at_file(path_, "the segmenter failed on " + std::to_string(n) +
                                               " windows: " + torch_error_cause(e)));
      util::release_cached_memory(device_);
      if (n == 1)
        throw ResourceError(at_file(path_, "one window of " + std::to_string(s) +
                                               " px does not fit (" +
                                               util::free_memory_text(device_) + ")"));
      const int half = n / 2;
      classify(rgb, half, classes);
      classify(rgb + half * s * s * 3, n - half, classes + half * s * s);
    }
  }

 private:
  // The classes of n windows, on the host.
  torch::Tensor run(const std::uint8_t* rgb, int n) {
    const std::int64_t s = contract_.input_size;
    torch::InferenceMode guard;
    const auto host = torch::from_blob(const_cast<std::uint8_t*>(rgb), {n, s, s, 3}, torch::kUInt8);
    const auto x =
        host.to(device_).permute({0, 3, 1, 2}).to(torch::kFloat32).div_(255.0f).contiguous();
    const auto scores = module_.forward({x}).toTensor();
    return scores.argmax(1).to(torch::kUInt8).to(torch::kCPU).contiguous();
  }

  void check_output() {
    const std::int64_t s = contract_.input_size;
    const auto c = static_cast<std::int64_t>(contract_.classes.size());
    torch::Tensor out;
    try {
      torch::InferenceMode guard;
      const auto x = torch::ones({2, 3, s, s}, torch::TensorOptions().device(device_));
      const auto result = module_.forward({x});
      if (!result.isTensor())
        throw InputError(at_file(path_, "the forward returns " + result.tagKind() +
                                            ", not a tensor of class scores (N x C x S x S)"));
      out = result.toTensor();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw InputError(at_file(path_, "the segmenter fails on 2 windows of 3 x " +
                                          std::to_string(s) + " x " + std::to_string(s) +
                                          " (input_size in mltool.json): " + torch_error_cause(e)));
    }
    const std::vector<std::int64_t> want{2, c, s, s};
    if (out.sizes().vec() != want) {
      std::string got;
      for (auto d : out.sizes()) got += (got.empty() ? "" : " x ") + std::to_string(d);
      throw InputError(at_file(path_, "the forward of 2 windows returns " + got + ", not 2 x " +
                                          std::to_string(c) + " x " + std::to_string(s) + " x " +
                                          std::to_string(s) +
                                          " (N x classes x S x S, as mltool.json's " +
                                          std::to_string(c) + " classes and input_size say)"));
    }
  }

  std::string path_;
  torch::Device device_;
  slide::SegmenterContract contract_;
  torch::jit::Module module_;
  std::uint64_t calls_ = 0;
};

}  // namespace

std::shared_ptr<slide::Segmenter> open_segmenter(const std::string& path,
                                                 const std::string& device) {
  if (!std::ifstream(path).good())
    throw InputError(at_file(path, "cannot open the segmenter (--tissue)"));
  return std::make_shared<TorchSegmenter>(path, util::resolve_devices(device).front());
}

}  // namespace mltool::features
