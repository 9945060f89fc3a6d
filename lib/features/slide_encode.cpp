// mltool extract --slide-encoder: a feature store of tiles → one row per slide (or group of
// slides) from a slide encoder (slide_encode.hpp).
#include "mltool/features/slide_encode.hpp"

#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>

#include "h5_interop_internal.hpp"
#include "mltool/features/chunked_writer.hpp"
#include "mltool/features/extractor.hpp"
#include "mltool/io/crc32c.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/util/device.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/oom.hpp"
#include "mltool/util/output_lock.hpp"
#include "slide_groups_internal.hpp"

namespace mltool::features {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using detail::Group;
using detail::Plan;

json file_identity(const std::string& path) {
  const util::MappedFile file(path);
  return {{"path", util::absolute_path(path)},
          {"bytes", file.size()},
          {"crc32c", io::crc32c(file.data(), file.size())}};
}

// The card, checked against the store: a slide encoder for this store's patch encoder and width.
EncoderCard check_card(const SlideEncodeJob& job, const io::FeatureStore& store) {
  if (!util::exists(job.encoder))
    throw InputError(at_file(job.encoder, "cannot open the slide encoder"));
  const auto card = read_encoder_card(job.encoder);
  if (!card)
    throw UsageError(at_file(job.encoder,
                             "has no encoder card (mltool.json) of kind slide: export the slide "
                             "encoder with scripts/encoders.py export NAME (schemas/"
                             "encoder.schema.json says what a slide encoder takes)"));
  if (!card->slide)
    throw UsageError(at_file(job.encoder, "is a patch encoder (" + card->label() +
                                              "), not a slide encoder: give it to --model"));
  const std::string patch = encoder_name_of(store.manifest().at("model"));
  if (card->patch_encoder != patch)
    throw UsageError(at_file(
        job.encoder,
        "the slide encoder " + card->label() + " takes features of the patch encoder '" +
            card->patch_encoder + "', but " + store.dir() + " holds features of " +
            (patch.empty() ? std::string("a model without an encoder card") : "'" + patch + "'")));
  if (card->patch_dims != 0 && static_cast<std::uint64_t>(card->patch_dims) != store.dims())
    throw UsageError(at_file(job.encoder, "the slide encoder " + card->label() + " takes " +
                                              std::to_string(card->patch_dims) +
                                              " values a tile, but " + store.dir() + " holds " +
                                              std::to_string(store.dims())));
  return *card;
}

// What the module takes for one group, on the CPU.
struct Inputs {
  torch::Tensor features;  // float32 N x D
  torch::Tensor coords;    // int64 N x 2, level-0 pixels
  std::int64_t tile_size = 0;
  double mpp = std::numeric_limits<double>::quiet_NaN();
};

// Coordinates and geometry from the tile store the features came from.
class Geometry {
 public:
  explicit Geometry(const io::FeatureStore& store) : store_(store) {
    const std::string path = store.tile_store();
    if (path.empty())
      throw InputError(at_file(util::join_path(store.dir(), io::kFeaturesManifestFile),
                               "names no tile store (source.tile_store): a slide encoder needs "
                               "the tiles' level-0 coordinates, which the tile store keeps"));
    if (!io::TileStore::is_store(path))
      throw InputError(
          at_file(path, "the tile store named by " +
                            util::join_path(store.dir(), io::kFeaturesManifestFile) +
                            " is not there (the slide encoder needs its coordinates)"));
    tiles_.emplace(io::TileStore::open(path, false));
  }
  const std::string& path() const { return tiles_->path(); }

  // The slides of a group side by side: each slide's x shifted by the level-0 widths of the
  // group's slides before it, so tiles of two slides never share a position.
  Inputs inputs(const Group& g) const {
    Inputs in;
    std::vector<std::int64_t> coords;
    std::vector<std::uint64_t> rows;
    std::int64_t offset = 0;
    for (std::size_t s = 0; s < g.slides.size(); ++s) {
      auto [xy, info] = detail::tile_coords(*tiles_, store_, g.slides[s], g.rows[s]);
      take_geometry(g, s, info, in);
      for (std::size_t i = 0; i < xy.size(); i += 2) {
        coords.push_back(xy[i] + offset);
        coords.push_back(xy[i + 1]);
      }
      offset += info.value("width", std::int64_t{0});
      rows.insert(rows.end(), g.rows[s].begin(), g.rows[s].end());
    }
    const auto n = static_cast<std::int64_t>(rows.size());
    in.features = torch::empty({n, static_cast<std::int64_t>(store_.dims())}, torch::kFloat32);
    store_.gather_f32(rows.data(), rows.size(), in.features.data_ptr<float>());
    in.coords = torch::tensor(coords, torch::kInt64).reshape({n, 2});
    return in;
  }

 private:
  // The tile side in level-0 pixels and the level-0 µm/px of slide s; the slides of a group
  // must agree (one value of each goes to the module).
  void take_geometry(const Group& g, std::size_t s, const json& info, Inputs& in) const {
    const std::int64_t tile = std::llround(info.value("size_level0", 0.0));
    const json mpp_value = info.value("mpp", json());
    const double mpp =
        mpp_value.is_number() ? mpp_value.get<double>() : std::numeric_limits<double>::quiet_NaN();
    if (s == 0) {
      in.tile_size = tile;
      in.mpp = mpp;
      return;
    }
    const bool same_mpp = (std::isnan(mpp) && std::isnan(in.mpp)) || mpp == in.mpp;
    if (tile != in.tile_size || !same_mpp)
      throw InputError("group '" + g.id + "': slides '" + g.slides.front() + "' and '" +
                       g.slides[s] + "' differ in tile size (" + std::to_string(in.tile_size) +
                       " and " + std::to_string(tile) + " level-0 px) or µm/px; a slide encoder " +
                       "takes one of each per group");
  }

  const io::FeatureStore& store_;
  std::optional<io::TileStore> tiles_;
};

// The slide encoder on one device, with a CPU copy loaded when a group does not fit the GPU.
class SlideModule {
 public:
  SlideModule(const EncoderCard& card, torch::Device device)
      : card_(card), device_(device), module_(load(device)) {}

  // One row of card.dims values; `fell_back` says the group ran on the CPU instead.
  std::vector<float> forward(const Inputs& in, const std::string& group, bool& fell_back) {
    fell_back = false;
    if (device_.is_cpu()) return on_cpu(module_, in, group);
    try {
      return run(module_, in, device_, group);
    } catch (const std::exception& e) {
      if (!util::is_out_of_memory(e)) throw;
      util::release_cached_memory(device_);  // what the failed forward cached
      log::warn("group '" + group + "': " + std::to_string(in.features.size(0)) +
                " tiles do not fit in " + device_.str() + "'s memory; encoding it on the CPU");
      if (!cpu_) cpu_ = load(torch::Device(torch::kCPU));
      fell_back = true;
      return on_cpu(*cpu_, in, group);
    }
  }

 private:
  torch::jit::Module load(torch::Device device) const {
    try {
      auto m = torch::jit::load(card_.file, device);
      m.eval();
      return m;
    } catch (const c10::Error& e) {
      throw InputError(at_file(
          card_.file, std::string("not a TorchScript module: ") + e.what_without_backtrace()));
    }
  }

  // On the CPU, whose memory is the last resort: running out there is the run's error.
  std::vector<float> on_cpu(torch::jit::Module& m, const Inputs& in, const std::string& group) {
    const torch::Device cpu(torch::kCPU);
    try {
      return run(m, in, cpu, group);
    } catch (const std::exception& e) {
      if (!util::is_out_of_memory(e)) throw;
      throw ResourceError(at_file(card_.file, "out of memory encoding group '" + group + "' (" +
                                                  std::to_string(in.features.size(0)) +
                                                  " tiles) on the CPU (" +
                                                  util::free_memory_text(cpu) + ")"));
    }
  }

  std::vector<float> run(torch::jit::Module& m, const Inputs& in, torch::Device d,
                         const std::string& group) {
    torch::InferenceMode guard;
    torch::jit::IValue out;
    try {
      out = m.forward({in.features.to(d), in.coords.to(d),
                       torch::tensor(in.tile_size, torch::kInt64).to(d),
                       torch::tensor(in.mpp, torch::kFloat64).to(d)});
    } catch (const std::exception& e) {
      if (util::is_out_of_memory(e)) throw;  // forward() encodes the group on the CPU
      throw ResourceError(at_file(card_.file, "the slide encoder failed on group '" + group +
                                                  "' (" + std::to_string(in.features.size(0)) +
                                                  " tiles): " + torch_error_cause(e)));
    }
    return row_of(out, group);
  }

  std::vector<float> row_of(const torch::jit::IValue& out, const std::string& group) const {
    const bool tensor = out.isTensor();
    const torch::Tensor t = tensor ? out.toTensor() : torch::Tensor();
    const bool fits =
        tensor && t.numel() == card_.dims && (t.dim() == 1 || (t.dim() == 2 && t.size(0) == 1));
    if (!fits)
      throw UsageError(at_file(
          card_.file, "the slide encoder returned " +
                          (tensor ? "a tensor of shape " + c10::str(t.sizes()) : out.tagKind()) +
                          " for group '" + group + "'; its card says [" +
                          std::to_string(card_.dims) + "] or [1, " + std::to_string(card_.dims) +
                          "]"));
    const torch::Tensor row = t.reshape({-1}).to(torch::kCPU, torch::kFloat32).contiguous();
    return {row.data_ptr<float>(), row.data_ptr<float>() + row.numel()};
  }

  const EncoderCard& card_;
  torch::Device device_;
  torch::jit::Module module_;
  std::optional<torch::jit::Module> cpu_;
};

// Everything that decides the rows, and so what a resume must repeat.
json fingerprint_of(const SlideEncodeJob& job, const io::FeatureStore& store, bool on_cpu,
                    int math_threads) {
  const std::string manifest =
      util::read_file(util::join_path(job.store, io::kFeaturesManifestFile));
  json groups;
  if (!job.group_table.empty()) {
    const std::string table = util::read_file(job.group_table);
    groups = {{"table", util::absolute_path(job.group_table)},
              {"crc32c", io::crc32c(table.data(), table.size())},
              {"column", job.group_column},
              {"skip_missing", job.skip_missing}};
  }
  json f = {{"features",
             {{"path", util::absolute_path(job.store)},
              {"rows", store.rows()},
              {"manifest_crc32c", io::crc32c(manifest.data(), manifest.size())}}},
            {"encoder", file_identity(job.encoder)},
            {"groups", groups},
            {"device", on_cpu ? "cpu" : "cuda"}};
  if (on_cpu) f["math_threads"] = math_threads;
  return f;
}

// What features.json records: the slide encoder (model) and the input store (source).
json model_of(const SlideEncodeJob& job, const EncoderCard& card) {
  json m = file_identity(job.encoder);
  m["kind"] = "slide-encoder";
  m["encoder"] = card.identity();
  m["dims"] = card.dims;
  return m;
}

json source_of(const io::FeatureStore& store, const Plan& plan, const std::string& tiles,
               const json& fingerprint) {
  const json& model = store.manifest().at("model");
  return {{"features", util::absolute_path(store.dir())},
          {"patch_encoder", encoder_name_of(model)},
          {"patch_model", model.value("encoder", json())},
          {"patch_dims", store.dims()},
          {"features_tile_store", tiles},
          {"input_rows", plan.input_rows},
          {"dropped_invalid", plan.dropped_invalid},
          {"skipped_slides", plan.skipped_slides},
          {"run", fingerprint}};
}

// A published output of the same input, encoder, grouping and dtype: nothing to do.
bool already_complete(const SlideEncodeJob& job, const json& fingerprint) {
  const std::string path = util::join_path(job.output, io::kFeaturesManifestFile);
  if (!util::exists(path)) return false;
  const json doc = json::parse(util::read_file(path), nullptr, false);
  if (!doc.is_object() || doc.value("dtype", json()) != std::string(io::name(job.dtype)))
    return false;
  const json run = doc.value("source", json::object()).value("run", json());
  if (!run.is_object()) return false;
  for (const char* field : {"features", "encoder", "groups"})
    if (run.value(field, json()) != fingerprint.at(field)) return false;
  return true;
}

// Encodes the groups from where an earlier run stopped, each committed as it is done.
void encode_groups(const Plan& plan, const Geometry& geometry, SlideModule& module,
                   ChunkedFeatureWriter& writer, SlideEncodeReport& r) {
  const std::vector<float> nan_row(r.dims, std::numeric_limits<float>::quiet_NaN());
  auto last_log = Clock::now();
  for (std::size_t i = writer.committed_rows(); i < plan.groups.size(); ++i) {
    const Group& g = plan.groups[i];
    const Inputs in = geometry.inputs(g);
    if (in.features.size(0) == 0) {
      log::warn("group '" + g.id + "': no valid tile; its row is invalid (NaN)");
      writer.append(g.id, nan_row.data(), true);
      writer.commit_chunk();
      continue;
    }
    bool fell_back = false;
    const std::vector<float> row = module.forward(in, g.id, fell_back);
    r.cpu_fallbacks += fell_back;
    const bool finite =
        std::all_of(row.begin(), row.end(), [](float v) { return std::isfinite(v); });
    if (!finite)
      log::warn("group '" + g.id +
                "': the slide encoder returned a value that is not finite; its row is invalid");
    writer.append(g.id, row.data(), !finite);
    writer.commit_chunk();
    if (Clock::now() - last_log > std::chrono::seconds(10)) {
      log::info(std::to_string(i + 1) + " of " + std::to_string(plan.groups.size()) + " encoded");
      last_log = Clock::now();
    }
  }
}

}  // namespace

SlideEncodeReport encode_slides(const SlideEncodeJob& job) {
  const auto start = Clock::now();
  util::check_options(slide_encode_options(), job);
  if (job.store.empty()) throw UsageError("--slide-encoder needs the feature store (store)");
  const auto store = io::FeatureStore::open(job.store);
  const EncoderCard card = check_card(job, store);
  const torch::Device device = util::resolve_devices(job.device).front();
  const util::OutputLock lock(job.output, "mltool extract --slide-encoder");
  const Plan plan = detail::plan_groups(job, store);
  const Geometry geometry(store);

  const json partial = ChunkedFeatureWriter::partial_config(job.output);
  const json stored = partial.is_object() ? partial.value("run", json()) : json();
  const int math_threads =
      device.is_cpu()
          ? util::set_math_threads(job.math_threads,
                                   stored.is_object() ? stored.value("math_threads", 0) : 0)
          : 0;
  SlideEncodeReport r;
  r.output = job.output;
  r.dims = static_cast<std::uint64_t>(card.dims);
  r.rows = plan.groups.size();
  r.input_rows = plan.input_rows;
  r.dropped_invalid = plan.dropped_invalid;
  r.skipped_slides = plan.skipped_slides;
  r.device = device.str();
  r.math_threads = math_threads;
  r.model = model_of(job, card);
  const json fingerprint = fingerprint_of(job, store, device.is_cpu(), math_threads);
  if (already_complete(job, fingerprint)) {
    r.skipped = true;
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return r;
  }
  if (plan.groups.empty()) throw InputError(at_file(job.store, "has no slide to encode"));
  if (plan.dropped_invalid)
    log::warn(std::to_string(plan.dropped_invalid) + " invalid (NaN) tile rows of " + job.store +
              " left out");
  ChunkedFeatureWriter writer(job.output, r.dims, fingerprint, 1);
  if (writer.committed_rows() > plan.groups.size())
    throw FormatError(at_file(writer.partial_dir(), "holds more rows than there are groups"));
  r.resumed_from = writer.committed_rows();
  if (r.resumed_from)
    log::info("resuming after " + std::to_string(r.resumed_from) + " of " +
              std::to_string(plan.groups.size()) + " groups");
  SlideModule module(card, device);
  encode_groups(plan, geometry, module, writer, r);
  r.invalid =
      writer.finish(job.dtype, r.model, source_of(store, plan, geometry.path(), fingerprint));
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace mltool::features
