// `mltool extract --merge`: the feature stores of `extract --shard I/N` runs joined into the
// store one run over the whole tile store would have written. Phases: open the inputs and
// read their source.shard, check they belong to one run (same tile store, model, settings),
// check they cover it (every shard once, no slide twice), then copy the rows slide by slide
// in store order and publish.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "mltool/features/shard.hpp"
#include "mltool/io/crc32c.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/output_lock.hpp"

namespace mltool::features {
namespace {

using json = nlohmann::json;

struct Input {
  std::string path;
  io::FeatureStore store;
  json shard;                     // source.shard
  json source;                    // source without shard and tile_store: the store's identity
  util::Shard part;               // index / count
  std::vector<SlideRows> slides;  // `first`: this input's row of the slide's first tile
};

std::string text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

Input open_input(const std::string& path) {
  Input in{path, io::FeatureStore::open(path), {}, {}, {}, {}};
  const json source = in.store.manifest().value("source", json::object());
  if (!source.is_object() || !source.contains("shard"))
    throw UsageError(at_file(path,
                             "is not the store of an `mltool extract --shard I/N` run "
                             "(features.json has no source.shard); --merge joins those"));
  const std::string manifest = util::join_path(path, io::kFeaturesManifestFile);
  try {
    in.shard = source.at("shard");
    in.part.index = in.shard.at("index").get<std::size_t>();
    in.part.count = in.shard.at("count").get<std::size_t>();
    std::uint64_t row = 0;
    for (const auto& s : in.shard.at("slides")) {
      in.slides.push_back({s.at("id").get<std::string>(), row, s.at("rows").get<std::uint64_t>()});
      row += in.slides.back().rows;
    }
    if (row != in.store.rows() || in.part.index >= in.part.count)
      throw FormatError("source.shard's slides hold " + std::to_string(row) + " rows, not " +
                        std::to_string(in.store.rows()) + ", or its index is out of range");
  } catch (const json::exception& e) {
    throw FormatError(at_file(manifest, std::string("source.shard: ") + e.what()));
  } catch (const FormatError& e) {
    throw FormatError(at_file(manifest, e.what()));
  }
  in.source = source;
  in.source.erase("shard");
  in.source.erase("tile_store");  // each machine may read its own copy of the tile store
  return in;
}

// The model without its file's path: copies of one model file on several machines agree
// (size and CRC-32C) and are the same model.
json model_identity(const Input& in) {
  json model = in.store.manifest().at("model");
  model.erase("path");
  return model;
}

void refuse_other(const Input& a, const Input& b, const std::string& what, const json& va,
                  const json& vb) {
  throw UsageError(at_file(b.path, "was extracted with " + what + " " + text(vb) + ", but " +
                                       a.path + " with " + text(va) +
                                       "; --merge joins the shards of one run (the same tile "
                                       "store and settings; give every shard the same flags)"));
}

// Every input must come from one run over one tile store: otherwise the merged rows would be
// no single run's.
void check_one_run(const std::vector<Input>& inputs) {
  const Input& a = inputs.front();
  for (const Input& b : inputs) {
    const auto& ma = a.store.manifest();
    const auto& mb = b.store.manifest();
    // The JPEG decoder first (absent: libjpeg-turbo on the host): the rest of the model is
    // then the same, and --decode is what differs.
    const json da = ma.at("model").value("decode", json("libjpeg-turbo"));
    const json db = mb.at("model").value("decode", json("libjpeg-turbo"));
    if (da != db) refuse_other(a, b, "--decode", da, db);
    if (model_identity(b) != model_identity(a))
      refuse_other(a, b, "--model", ma.at("model"), mb.at("model"));
    if (mb.at("dtype") != ma.at("dtype")) refuse_other(a, b, "--dtype", ma["dtype"], mb["dtype"]);
    if (b.part.count != a.part.count) refuse_other(a, b, "--shard", a.part.text(), b.part.text());
    const json ra = a.shard.value("run", json::object());
    const json rb = b.shard.value("run", json::object());
    for (const char* field : {"batch", "device", "math_threads"})
      if (ra.value(field, json()) != rb.value(field, json()))
        refuse_other(
            a, b,
            std::string(field) == "math_threads" ? "--math-threads" : "--" + std::string(field),
            ra.value(field, json()), rb.value(field, json()));
    const std::vector<std::string> identity = {"store_slides", "store_rows", "store_keys_crc32c"};
    bool same = b.source == a.source;
    for (const auto& field : identity)
      same = same && b.shard.value(field, json()) == a.shard.value(field, json());
    if (!same)
      throw UsageError(at_file(
          b.path,
          "was extracted from another tile store than " + a.path +
              " (or from it before it changed): " + text(b.shard.value("store_rows", json())) +
              " tiles vs " + text(a.shard.value("store_rows", json())) +
              "; --merge joins the shards of one tile store"));
  }
}

// Every shard of the run once, and no slide twice.
void check_cover(const std::vector<Input>& inputs) {
  const std::size_t count = inputs.front().part.count;
  std::map<std::size_t, const Input*> by_index;
  std::map<std::string, const Input*> by_slide;
  for (const Input& in : inputs) {
    const auto [it, fresh] = by_index.emplace(in.part.index, &in);
    if (!fresh)
      throw UsageError(at_file(in.path, "holds shard " + in.part.text() + ", as " +
                                            it->second->path +
                                            " does: its slides would be present twice; give "
                                            "each shard's store once"));
    for (const auto& s : in.slides) {
      const auto [at, new_slide] = by_slide.emplace(s.id, &in);
      if (!new_slide)
        throw UsageError(at_file(in.path, "holds slide '" + s.id + "', as " + at->second->path +
                                              " does: a slide may be present once"));
    }
  }
  std::string missing;
  for (std::size_t i = 0; i < count; ++i)
    if (!by_index.count(i)) missing += (missing.empty() ? "" : ", ") + util::Shard{i, count}.text();
  if (!missing.empty())
    throw UsageError("--merge: shard(s) " + missing + " of " + std::to_string(count) +
                     " missing: give the store of every `extract --shard I/" +
                     std::to_string(count) + "` run (" + std::to_string(inputs.size()) + " given)");
  const json& shard = inputs.front().shard;
  if (by_slide.size() != shard.value("store_slides", std::size_t{0}))
    throw FormatError(
        at_file(inputs.front().path, "the shards hold " + std::to_string(by_slide.size()) +
                                         " slides, but source.shard.store_slides says " +
                                         text(shard.value("store_slides", json()))));
}

struct Block {
  const Input* input;
  const SlideRows* slide;
};

// The merged store's source: the whole tile store's, as one run writes it, and the inputs.
json merged_source(const std::vector<const Input*>& by_index) {
  json source = by_index.front()->store.manifest().at("source");
  source.erase("shard");
  json from = json::array();
  for (const Input* in : by_index)
    from.push_back({{"path", util::absolute_path(in->path)}, {"shard", in->part.text()}});
  source["merged_from"] = from;
  return source;
}

// The shards' split_batches (rows computed in pieces after an out-of-memory error) with their
// rows renumbered as the merged store has them: an entry whose rows the merge separates (its
// batch spans slides that other shards' slides now come between) becomes one per stretch.
class MergedSplits {
 public:
  // Row `row` of `in` became row `out` of the merged store.
  void add(const Input& in, std::uint64_t row, std::uint64_t out) {
    const json& manifest = in.store.manifest();
    const auto found = manifest.find("split_batches");
    if (found == manifest.end()) return;
    const json& splits = *found;
    auto& next = next_[&in];  // rows come in ascending order per input
    while (next < splits.size() && end_of(splits[next]) <= row) ++next;
    if (next == splits.size() || splits[next].at("first_row").get<std::uint64_t>() > row) return;
    const json& s = splits[next];
    if (!out_.empty() && last_ == std::make_pair(&in, next) && end_of(out_.back()) == out) {
      out_.back()["rows"] = out_.back().at("rows").get<std::uint64_t>() + 1;
      return;
    }
    out_.push_back({{"batch", s.at("batch")},
                    {"size", s.at("size")},
                    {"oom", s.at("oom")},
                    {"first_row", out},
                    {"rows", 1}});
    last_ = {&in, next};
  }
  json take() { return std::move(out_); }

 private:
  static std::uint64_t end_of(const json& s) {
    return s.at("first_row").get<std::uint64_t>() + s.at("rows").get<std::uint64_t>();
  }
  std::map<const Input*, std::size_t> next_;
  std::pair<const Input*, std::size_t> last_{nullptr, 0};
  json out_ = json::array();
};

// Copies the rows slide by slide in store order; returns the invalid rows.
std::uint64_t write_merged(const std::vector<const Input*>& by_index, const std::string& output) {
  const Input& first = *by_index.front();
  std::vector<Block> blocks;
  for (const Input* in : by_index)
    for (const auto& s : in->slides) blocks.push_back({in, &s});
  std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) {
    return io::before_in_key_order(a.slide->id, b.slide->id);
  });
  io::FeatureStoreWriter out(output, first.store.dims(), first.store.dtype(),
                             first.store.manifest().at("model"), merged_source(by_index));
  std::uint32_t crc = 0;
  MergedSplits splits;
  json stain_fits = json::object();  // --stain-fit slide: each slide's, as its shard recorded it
  for (const Block& b : blocks) {
    const io::FeatureStore& in = b.input->store;
    const json fits = in.manifest().value("stain_fits", json());
    if (fits.is_object() && fits.contains(b.slide->id))
      stain_fits[b.slide->id] = fits.at(b.slide->id);
    const auto* data = static_cast<const unsigned char*>(in.data());
    const auto& invalid = in.invalid_rows();
    for (std::uint64_t r = b.slide->first; r < b.slide->first + b.slide->rows; ++r) {
      const std::string_view key = in.key(r);
      if (io::slide_of_key(key) != b.slide->id)
        throw FormatError(at_file(in.dir(), "row " + std::to_string(r) + " (" + std::string(key) +
                                                ") is not of slide '" + b.slide->id +
                                                "', as source.shard.slides says"));
      out.append_stored(key, data + r * in.row_bytes());
      if (std::binary_search(invalid.begin(), invalid.end(), r)) out.mark_invalid(out.rows() - 1);
      splits.add(*b.input, r, out.rows() - 1);
      crc = io::crc32c_extend(io::crc32c_extend(crc, key.data(), key.size()), "\n", 1);
    }
  }
  if (crc != first.shard.value("store_keys_crc32c", std::uint32_t{0}))
    throw FormatError(at_file(output, "the merged keys are not the tile store's (CRC-32C " +
                                          std::to_string(crc) + ", the shards recorded " +
                                          text(first.shard.value("store_keys_crc32c", json())) +
                                          ")"));
  out.set_split_batches(splits.take());
  out.set_stain_fits(std::move(stain_fits));
  out.finish();
  std::uint64_t invalid = 0;
  for (const Input* in : by_index) invalid += in->store.invalid_rows().size();
  return invalid;
}

}  // namespace

ShardMergeReport merge_shards(const std::vector<std::string>& inputs, const std::string& output) {
  const auto start = std::chrono::steady_clock::now();
  if (inputs.empty()) throw UsageError("--merge: no feature stores given");
  for (const auto& path : inputs)
    if (util::absolute_path(path) == util::absolute_path(output))
      throw UsageError(at_file(path, "is both an input and the output (-o) of --merge"));
  const util::OutputLock lock(output, "mltool extract --merge");
  std::vector<Input> opened;
  for (const auto& path : inputs) opened.push_back(open_input(path));
  check_one_run(opened);
  check_cover(opened);
  std::vector<const Input*> by_index;
  for (const Input& in : opened) by_index.push_back(&in);
  std::sort(by_index.begin(), by_index.end(),
            [](const Input* a, const Input* b) { return a->part.index < b->part.index; });

  ShardMergeReport report;
  report.output = output;
  report.invalid = write_merged(by_index, output);
  report.dims = by_index.front()->store.dims();
  report.model = by_index.front()->store.manifest().at("model");
  for (const Input* in : by_index) {
    report.rows += in->store.rows();
    report.shards.push_back({in->path, in->part.text(), in->slides.size(), in->store.rows()});
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::info(output + ": " + std::to_string(report.rows) + " rows of " +
            std::to_string(by_index.size()) + " shards merged");
  return report;
}

nlohmann::json to_json(const ShardMergeReport& r) {
  json shards = json::array();
  for (const auto& s : r.shards)
    shards.push_back(
        {{"path", s.path}, {"shard", s.shard}, {"slides", s.slides}, {"rows", s.rows}});
  return {{"command", "extract"}, {"output", r.output}, {"status", "merged"},
          {"rows", r.rows},       {"dims", r.dims},     {"invalid", r.invalid},
          {"shards", shards},     {"model", r.model},   {"seconds", r.seconds}};
}

}  // namespace mltool::features
