#include "mltool/features/extractor.hpp"

#include <torch/script.h>

#include <ATen/autocast_mode.h>
#include <caffe2/serialize/inline_container.h>

#include <cmath>
#include <fstream>

#include "mltool/io/crc32c.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/oom.hpp"

namespace mltool::features {
namespace {

namespace F = torch::nn::functional;
using json = nlohmann::json;

// Autocast on for the calling thread while alive.
class AutocastGuard {
 public:
  AutocastGuard(torch::Device device, Amp amp) : type_(device.type()), on_(amp != Amp::none) {
    if (!on_) return;
    was_enabled_ = at::autocast::is_autocast_enabled(type_);
    was_dtype_ = at::autocast::get_autocast_dtype(type_);
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, amp == Amp::f16 ? at::kHalf : at::kBFloat16);
  }
  ~AutocastGuard() {
    if (!on_) return;
    at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(type_, was_enabled_);
    at::autocast::set_autocast_dtype(type_, was_dtype_);
  }

 private:
  at::DeviceType type_;
  bool on_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

const char* amp_name(Amp amp) { return util::name_of(kAmps, amp); }

class TorchScriptExtractor final : public Extractor {
 public:
  TorchScriptExtractor(std::string path, torch::Device device, int tile_size,
                       const ModelSettings& settings)
      : path_(util::absolute_path(path)),
        device_(device),
        preprocess_(settings.preprocess),
        amp_(settings.amp),
        card_(settings.card) {
    if (!std::ifstream(path_).good())
      throw InputError(at_file(path_, "cannot open the TorchScript model"));
    {
      // The file's identity goes into features.json, so a replaced model is never mistaken
      // for the one that made a store (a size and a CRC-32C of the bytes: cheap, and enough).
      const util::MappedFile file(path_);
      bytes_ = file.size();
      crc_ = io::crc32c(file.data(), file.size());
    }
    try {
      module_ = torch::jit::load(path_, device_);
    } catch (const c10::Error& e) {
      throw InputError(
          at_file(path_, std::string("not a TorchScript model: ") + e.what_without_backtrace()));
    }
    module_.eval();
    // Probe: two tiles, so a batch dimension that is squeezed away or mixed up shows.
    const auto probe = torch::zeros({2, tile_size, tile_size, 3},
                                    torch::TensorOptions().dtype(torch::kUInt8).device(device_));
    torch::Tensor out;
    try {
      out = run(probe);
    } catch (const Error&) {
      throw;
    } catch (
        const std::exception& e) {  // c10::Error, and torch::jit::JITException for script errors
      throw UsageError(at_file(path_, "the model fails on a batch of 2 tiles of " +
                                          std::to_string(preprocess_.input_size) +
                                          " px: " + torch_error_cause(e)));
    }
    if (!settings.allow_wide) check_width(out_shape_, out.size(1));
    dims_ = out.size(1);
  }

  torch::Tensor forward(const torch::Tensor& nhwc) override {
    try {
      return run(nhwc);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      if (util::is_out_of_memory(e)) throw;  // the caller splits the batch (batch_split.hpp)
      throw ResourceError(at_file(path_, "the forward pass of a batch of " +
                                             std::to_string(nhwc.size(0)) +
                                             " tiles failed: " + torch_error_cause(e)));
    }
  }
  std::int64_t dims() const override { return dims_; }
  torch::Device device() const override { return device_; }
  json describe() const override {
    json d = {{"kind", "torchscript"},
              {"path", path_},
              {"bytes", bytes_},
              {"crc32c", crc_},
              {"input_size", preprocess_.input_size},
              {"mean", preprocess_.mean},
              {"std", preprocess_.std},
              {"amp", amp_name(amp_)}};
    if (preprocess_.rule) {
      const ResizeRule& r = *preprocess_.rule;
      d["resize"] = {{"size", r.resize},
                     {"interpolation", r.bicubic ? "bicubic" : "bilinear"},
                     {"antialias", r.antialias},
                     {"crop", r.crop}};
    }
    if (card_) d["encoder"] = card_->identity();
    return d;
  }

 private:
  torch::Tensor run(const torch::Tensor& nhwc) {
    torch::InferenceMode guard;
    const torch::Tensor x = preprocess(nhwc, preprocess_);
    torch::jit::IValue result;
    {
      AutocastGuard autocast(device_, amp_);
      result = module_.forward({x});
    }
    if (!result.isTensor())
      throw UsageError(at_file(
          path_, std::string("the model returns a ") + result.tagKind() +
                     ", not one tensor; export a module whose forward returns the features"));
    const torch::Tensor out = result.toTensor();
    if (out.dim() < 1 || out.size(0) != nhwc.size(0) || out.numel() == 0)
      throw UsageError(
          at_file(path_, "the model's output " + shape_text(out) + " does not have the batch (" +
                             std::to_string(nhwc.size(0)) + ") as its first dimension"));
    out_shape_ = shape_text(out);
    if (out.dim() > 2) out_dims_ = out.dim();
    return out.reshape({out.size(0), -1}).to(torch::kFloat32);
  }

  // Token outputs without pooling (a ViT's N×261×1280) would store hundreds of thousands of
  // values a tile: refused unless asked for.
  void check_width(const std::string& shape, std::int64_t width) const {
    if (out_dims_ <= 2 && width <= kMaxFeatureWidth) return;
    throw UsageError(at_file(
        path_, "the model's output for a batch of 2 tiles is " + shape + " (" +
                   std::to_string(width) + " values a tile" +
                   (out_dims_ > 2 ? ", more than two dimensions" : "") +
                   "): likely its tokens without pooling; export the model card's pooled "
                   "output (scripts/encoders.py export), or pass --allow-wide-features to store "
                   "them flattened"));
  }

  static std::string shape_text(const torch::Tensor& t) {
    std::string s = "[";
    for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
    return s + "]";
  }

  std::string path_;
  torch::Device device_;
  Preprocess preprocess_;
  Amp amp_;
  std::optional<EncoderCard> card_;
  std::string out_shape_;
  std::int64_t out_dims_ = 2;
  torch::jit::Module module_;
  std::int64_t dims_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint32_t crc_ = 0;
};

// builtin:color-texture — colour and texture statistics of each tile at its own size,
// computed with torch ops on the tile's device; needs no weights.
class ColorTextureExtractor final : public Extractor {
 public:
  static constexpr int kBins = 16;
  explicit ColorTextureExtractor(torch::Device device) : device_(device) {}

  torch::Tensor forward(const torch::Tensor& nhwc) override {
    torch::InferenceMode guard;
    // A few tiles at a time: the float intermediates of a whole batch of 256 would take
    // gigabytes, for no gain in speed.
    std::vector<torch::Tensor> out;
    for (std::int64_t i = 0; i < nhwc.size(0); i += kChunk)
      out.push_back(features(nhwc.narrow(0, i, std::min(kChunk, nhwc.size(0) - i))));
    return torch::cat(out, 0);
  }

 private:
  static constexpr std::int64_t kChunk = 16;

  // -log10((v / 255 + 1/255) / (1 + 1/255)) for v = 0..255, float32.
  static const torch::Tensor& density_table() {
    static const torch::Tensor t = [] {
      std::vector<float> v(256);
      for (int i = 0; i < 256; ++i)
        v[static_cast<std::size_t>(i)] = static_cast<float>(-std::log10((i + 1.0) / 256.0));
      return torch::tensor(v);
    }();
    return t;
  }

  torch::Tensor features(const torch::Tensor& nhwc) {
    const auto n = nhwc.size(0);
    const torch::Tensor rgb = nhwc.permute({0, 3, 1, 2}).to(torch::kFloat32).div(255.0);  // N×3×H×W
    const torch::Tensor flat = rgb.flatten(2);                                            // N×3×P
    std::vector<torch::Tensor> parts;
    parts.push_back(flat.mean(2));                     // 3: mean R, G, B
    parts.push_back(flat.std(2, /*unbiased=*/false));  // 3: std R, G, B
    // 48: per-channel histograms, 16 bins over [0, 1], as fractions of the tile.
    const torch::Tensor bins = (flat * kBins).floor().clamp(0, kBins - 1).to(torch::kLong);
    const torch::Tensor hist =
        torch::zeros({n, 3, kBins}, flat.options()).scatter_add_(2, bins, torch::ones_like(flat));
    parts.push_back((hist / static_cast<double>(flat.size(2))).flatten(1));
    // 3: mean optical density per channel, -log10((I + 1/255) / (1 + 1/255)): stain amount.
    // A table of its 256 values: torch.log10 on the CPU is MKL's, whose last bit changes with
    // the CPU (MKL_CBWR), and a feature must not.
    const torch::Tensor od =
        density_table()
            .to(nhwc.device())
            .index_select(0, nhwc.permute({0, 3, 1, 2}).flatten().to(torch::kInt32))
            .view_as(flat);
    parts.push_back(od.mean(2));
    // 2: HSV saturation mean and std.
    const torch::Tensor mx = std::get<0>(rgb.max(1)), mn = std::get<0>(rgb.min(1));
    const torch::Tensor sat =
        torch::where(mx > 0, (mx - mn) / mx.clamp_min(1e-12), torch::zeros_like(mx)).flatten(1);
    parts.push_back(sat.mean(1, /*keepdim=*/true));
    parts.push_back(sat.std(1, /*unbiased=*/false, /*keepdim=*/true));
    // 3: texture on luma (BT.601): Sobel gradient magnitude mean and std, |Laplacian| mean.
    const torch::Tensor weights =
        torch::tensor({0.299f, 0.587f, 0.114f}, flat.options()).view({1, 3, 1, 1});
    const torch::Tensor luma = (rgb * weights).sum(1, true);  // N×1×H×W
    const auto opts = flat.options();
    const torch::Tensor sobel_x =
        torch::tensor({-1.f, 0.f, 1.f, -2.f, 0.f, 2.f, -1.f, 0.f, 1.f}, opts).view({1, 1, 3, 3});
    const torch::Tensor sobel_y = sobel_x.transpose(2, 3).contiguous();
    const torch::Tensor lap =
        torch::tensor({0.f, 1.f, 0.f, 1.f, -4.f, 1.f, 0.f, 1.f, 0.f}, opts).view({1, 1, 3, 3});
    const torch::Tensor gx = F::conv2d(luma, sobel_x), gy = F::conv2d(luma, sobel_y);
    // The square root in double, rounded to float: float32's torch.sqrt on the CPU is MKL's,
    // whose last bit changes with the CPU (MKL_CBWR); double's rounds to the correctly rounded
    // float everywhere.
    const torch::Tensor magnitude =
        (gx * gx + gy * gy).to(torch::kFloat64).sqrt().to(torch::kFloat32).flatten(1);
    parts.push_back(magnitude.mean(1, true));
    parts.push_back(magnitude.std(1, false, true));
    parts.push_back(F::conv2d(luma, lap).abs().flatten(1).mean(1, true));
    return torch::cat(parts, 1);
  }

 public:
  std::int64_t dims() const override { return 3 + 3 + 3 * kBins + 3 + 2 + 3; }
  torch::Device device() const override { return device_; }
  json describe() const override { return {{"kind", "builtin"}, {"name", "color-texture"}}; }

 private:
  torch::Device device_;
};

}  // namespace

std::vector<std::string> builtin_names() { return {"color-texture"}; }

std::string describe_builtin(const std::string& name) {
  if (name != "color-texture") return {};
  return "62 columns, from the tile at its stored size, pixel values in [0, 1]:\n"
         "  0-2    mean R, G, B\n"
         "  3-5    standard deviation R, G, B\n"
         "  6-53   histograms of R, G, B: 16 bins each over [0, 1], as fractions of the tile\n"
         "  54-56  mean optical density per channel, -log10((I + 1/255) / (1 + 1/255))\n"
         "  57-58  HSV saturation: mean, standard deviation\n"
         "  59-60  Sobel gradient magnitude of luma (BT.601): mean, standard deviation\n"
         "  61     mean |Laplacian| of luma (4-neighbour kernel)";
}

std::string torch_error_cause(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  const std::string m = c10 ? c10->what_without_backtrace() : e.what();
  std::size_t end = m.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return m;
  const std::size_t start = m.rfind('\n', end);
  return m.substr(start == std::string::npos ? 0 : start + 1,
                  end + 1 - (start == std::string::npos ? 0 : start + 1));
}

std::optional<EncoderCard> read_encoder_card(const std::string& path) {
  const std::string record = std::string("extra/") + kEncoderCardFile;
  std::string text;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    if (!reader.hasRecord(record)) return std::nullopt;
    const auto [data, size] = reader.getRecord(record);
    text.assign(static_cast<const char*>(data.get()), size);
  } catch (const c10::Error&) {
    return std::nullopt;  // not a TorchScript archive: torch::jit::load says so, naming the file
  }
  return parse_encoder_card(text, path);
}

std::unique_ptr<Extractor> load_extractor(const std::string& spec, torch::Device device,
                                          int tile_size, const ModelSettings& settings) {
  const std::string prefix = "builtin:";
  if (spec.rfind(prefix, 0) == 0) {
    const std::string name = spec.substr(prefix.size());
    if (name == "color-texture") return std::make_unique<ColorTextureExtractor>(device);
    std::string known;
    for (const auto& n : builtin_names()) known += (known.empty() ? "" : ", ") + prefix + n;
    throw UsageError("unknown built-in extractor '" + spec + "'; built-ins: " + known);
  }
  return std::make_unique<TorchScriptExtractor>(spec, device, tile_size, settings);
}

}  // namespace mltool::features
