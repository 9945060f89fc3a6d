// The second pass of `mltool inspect` (see inspect_scan.hpp): records, labels and the label mix
// of every decile, chunk by chunk on all threads; then the merge of the chunks.
#include "inspect_scan.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <unordered_map>

#include "mltool/io/crc32c.hpp"
#include "mltool/io/example_scan.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/parallel.hpp"
#include "task_spec.hpp"

namespace mltool::records::detail {
namespace {

// Label values of TFRecord files, to chunk-local ids: keys are 'i' + the 8 bytes of an int64,
// or 'b' + the bytes. Consecutive records usually share a label, so the last one is cached.
class LabelIds {
 public:
  std::uint32_t of_int(std::int64_t v) {
    key_.assign(1, 'i');
    key_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return lookup();
  }
  std::uint32_t of_bytes(std::string_view v) {
    key_.assign(1, 'b');
    key_.append(v);
    return lookup();
  }
  const std::vector<std::string>& keys() const { return keys_; }

 private:
  std::uint32_t lookup() {
    if (last_ != kNone && keys_[last_] == key_) return last_;
    const auto [it, added] = ids_.try_emplace(key_, static_cast<std::uint32_t>(keys_.size()));
    if (added) keys_.push_back(key_);
    return last_ = it->second;
  }
  static constexpr std::uint32_t kNone = UINT32_MAX;
  std::unordered_map<std::string, std::uint32_t> ids_;
  std::vector<std::string> keys_;
  std::string key_;
  std::uint32_t last_ = kNone;
};

struct Chunk {
  std::size_t shard = 0;
  std::uint64_t first = 0, end = 0;  // records [first, end)
  std::uint64_t offset = 0;          // byte of record `first`
  // results, by chunk-local label id (datasets: the label id itself)
  std::vector<std::uint64_t> histogram;
  std::array<std::vector<std::uint64_t>, kDeciles> deciles;
  std::uint64_t unlabeled = 0;
  Moments outcome;
  LabelIds ids;
  std::exception_ptr error;
};

class ChunkReader {
 public:
  ChunkReader(const ScanSpec& spec, const Framing& framing, const RoundRobin& schedule,
              std::size_t index_in_group, Chunk& chunk)
      : spec_(spec),
        framing_(framing),
        schedule_(schedule),
        in_group_(index_in_group),
        c_(chunk),
        names_(feature_names(spec)),
        scanner_(names_) {}

  void run() {
    auto reader = io::TFRecordReader::from_buffer(spec_.shards[c_.shard].path, framing_.map->data(),
                                                  framing_.map->size(), {spec_.deep});
    if (spec_.label_ids) grow(*spec_.label_ids);
    int d = schedule_.decile(in_group_, c_.first);
    std::uint64_t next =
        d + 1 < kDeciles ? schedule_.first_record_in(in_group_, d + 1) : UINT64_MAX;
    std::uint64_t offset = c_.offset;
    for (record_ = c_.first; record_ < c_.end; ++record_) {
      offset_ = offset;
      const std::string_view bytes = frame(reader, offset);
      offset += bytes.size() + io::kTFRecordOverhead;
      if (!scanner_.scan(bytes)) fail(scanner_.error());
      while (record_ >= next) {
        ++d;
        next = d + 1 < kDeciles ? schedule_.first_record_in(in_group_, d + 1) : UINT64_MAX;
      }
      if (has_outcome_stats(spec_.task)) {
        read_outcome();
      } else if (has_label_map(spec_.task)) {
        count_label(d);
      }  // multilabel: deep checks its outcome features with the record_features
      if (spec_.deep && !spec_.record_features.empty()) check_record();
    }
  }

 private:
  static constexpr std::uint32_t kUnlabeled = UINT32_MAX;

  // The record's label id into the histograms of decile `d`, or counted unlabeled.
  void count_label(int d) {
    const std::uint32_t label = label_id();
    if (label == kUnlabeled) {
      ++c_.unlabeled;
      return;
    }
    ++c_.histogram[label];
    ++c_.deciles[d][label];
  }

  // The record of the frame at `offset`, its CRCs checked here (the data CRC under deep); a
  // frame that fails is read again by the reader, which words the problem.
  std::string_view frame(io::TFRecordReader& reader, std::uint64_t offset) const {
    const std::uint8_t* const p = framing_.map->data() + offset;
    const std::uint64_t left = framing_.map->size() - offset;
    if (left >= io::kTFRecordOverhead) {
      const std::uint64_t length = util::load_le64(p);
      if (length <= left - io::kTFRecordOverhead &&
          io::mask_crc(io::crc32c(p, 8)) == util::load_le32(p + 8) &&
          (!spec_.deep ||
           io::mask_crc(io::crc32c(p + 12, length)) == util::load_le32(p + 12 + length)))
        return {reinterpret_cast<const char*>(p + 12), static_cast<std::size_t>(length)};
    }
    reader.read_at(offset);  // throws
    throw FormatError(at_offset(spec_.shards[c_.shard].path, offset, "not a TFRecord frame"));
  }

  // The features read: the label (slot 0) or the outcome's (slots 0, 1), then under deep the
  // other record features.
  static std::vector<std::string> feature_names(const ScanSpec& spec) {
    std::vector<std::string> names = has_label_map(spec.task)
                                         ? std::vector<std::string>{spec.label_feature}
                                         : outcome_features(spec.task);
    if (spec.deep)
      for (const RecordFeature& f : spec.record_features)
        if (std::find(names.begin(), names.end(), f.name) == names.end()) names.push_back(f.name);
    return names;
  }

  // The one float of outcome feature `slot`.
  float one_float(std::size_t slot) const {
    const std::string& name = names_[slot];
    if (!scanner_.has(slot)) fail("missing feature '" + name + "'");
    if (scanner_.kind(slot) != io::FeatureKind::float_list)
      fail("feature '" + name + "' is of kind " + io::to_string(scanner_.kind(slot)) +
           ", expected float_list");
    if (scanner_.floats(slot).size() != 1)
      fail("feature '" + name + "' has " + std::to_string(scanner_.floats(slot).size()) +
           " values, expected exactly 1");
    return scanner_.floats(slot)[0];
  }

  // The outcome's floats (regression: the target; survival: the time, the event), checked as
  // the codec checks them; inspect's figure is made of one of them.
  void read_outcome() {
    const PackTaskSpec& task = spec_of(spec_.task);
    std::vector<float>& values = outcome_values_;
    values.clear();
    for (std::size_t slot = 0; slot < task.codec.features.size(); ++slot)
      values.push_back(one_float(slot));
    if (const auto why = task.codec.invalid(values)) fail(*why);
    c_.outcome.add(values[task.figure_value]);
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(spec_.shards[c_.shard].path + ": record " + std::to_string(record_) +
                      " (byte " + std::to_string(offset_) + "): " + what);
  }

  void grow(std::size_t labels) {
    c_.histogram.resize(labels, 0);
    for (auto& d : c_.deciles) d.resize(labels, 0);
  }

  std::uint32_t label_id() {
    const std::string& name = spec_.label_feature;
    if (!scanner_.has(0)) {
      if (spec_.label_ids) fail("missing feature '" + name + "'");
      return kUnlabeled;
    }
    const io::FeatureKind kind = scanner_.kind(0);
    if (spec_.label_ids) {
      if (kind != io::FeatureKind::int64_list)
        fail("feature '" + name + "' is of kind " + io::to_string(kind) + ", expected int64_list");
    } else if (kind != io::FeatureKind::int64_list && kind != io::FeatureKind::bytes_list) {
      fail("feature '" + name + "' is of kind " + io::to_string(kind) +
           ", expected int64_list or bytes_list");
    }
    const std::size_t n =
        kind == io::FeatureKind::bytes_list ? scanner_.bytes(0).size() : scanner_.int64s(0).size();
    if (n != 1)
      fail("feature '" + name + "' has " + std::to_string(n) + " values, expected exactly 1");
    if (spec_.label_ids) {
      const std::int64_t v = scanner_.int64s(0)[0];
      if (v < 0 || static_cast<std::uint64_t>(v) >= *spec_.label_ids) {
        fail("label " + std::to_string(v) +
             " is not an id of the label map (dataset.json labels.names has " +
             std::to_string(*spec_.label_ids) + ")");
      }
      return static_cast<std::uint32_t>(v);
    }
    const std::uint32_t id = kind == io::FeatureKind::int64_list
                                 ? c_.ids.of_int(scanner_.int64s(0)[0])
                                 : c_.ids.of_bytes(scanner_.bytes(0)[0]);
    if (id >= c_.histogram.size()) grow(id + 1);
    return id;
  }

  // Deep, datasets: exactly the record features of dataset.json, row indices in range.
  void check_record() {
    if (scanner_.other_features() != 0)
      fail("feature '" + std::string(scanner_.first_other()) +
           "' is not in dataset.json record_features");
    for (const Expected& e : expected_) {
      if (!scanner_.has(e.slot))
        fail("missing feature '" + e.name + "' (dataset.json record_features lists it)");
      const io::FeatureKind kind = scanner_.kind(e.slot);
      if (kind != e.kind && !(e.list && kind == io::FeatureKind::none))
        fail("feature '" + e.name + "' is of kind " + io::to_string(kind) + ", expected " +
             io::to_string(e.kind));
      const std::size_t n = kind == io::FeatureKind::bytes_list   ? scanner_.bytes(e.slot).size()
                            : kind == io::FeatureKind::float_list ? scanner_.floats(e.slot).size()
                                                                  : scanner_.int64s(e.slot).size();
      if (!e.list && n != 1)
        fail("feature '" + e.name + "' has " + std::to_string(n) + " values, expected exactly 1");
      if (e.rows)
        for (const std::int64_t row : scanner_.int64s(e.slot)) check_row(e.name, row);
    }
  }

  // A record feature and its slot in the scanner, worked out once for check_record().
  struct Expected : RecordFeature {
    std::size_t slot;
  };
  static std::vector<Expected> expectations(const ScanSpec& spec,
                                            const std::vector<std::string>& names) {
    std::vector<Expected> out;
    for (const RecordFeature& f : spec.record_features)
      out.push_back({f, static_cast<std::size_t>(std::find(names.begin(), names.end(), f.name) -
                                                 names.begin())});
    return out;
  }

  void check_row(const std::string& name, std::int64_t row) const {
    if (row < 0 || static_cast<std::uint64_t>(row) >= spec_.rows) {
      fail("feature '" + name + "' holds row " + std::to_string(row) +
           ", but the feature store has " + std::to_string(spec_.rows) +
           " rows (dataset.json features.rows)");
    }
    if (!spec_.invalid_rows.empty() &&
        std::binary_search(spec_.invalid_rows.begin(), spec_.invalid_rows.end(),
                           static_cast<std::uint64_t>(row))) {
      fail("feature '" + name + "' holds row " + std::to_string(row) +
           ", which the feature store's features.json lists as invalid");
    }
  }

  const ScanSpec& spec_;
  const Framing& framing_;
  const RoundRobin& schedule_;
  std::size_t in_group_;
  Chunk& c_;
  std::vector<std::string> names_;
  io::ExampleScanner scanner_;
  std::vector<Expected> expected_ = expectations(spec_, names_);
  std::uint64_t record_ = 0;
  std::uint64_t offset_ = 0;
  std::vector<float> outcome_values_;  // read_outcome's, kept to spare an allocation a record
};

// The key of LabelIds as a label name, and whether it was an int64.
std::pair<std::string, bool> label_name(const std::string& key) {
  if (key[0] == 'i') {
    std::int64_t v;
    std::memcpy(&v, key.data() + 1, sizeof v);
    return {std::to_string(v), true};
  }
  return {key.substr(1), false};
}

// Each shard's record count and size into `out`, the round-robin schedule of each group
// into out.schedules; returns each shard's position within its group.
std::vector<std::size_t> lay_out(const ScanSpec& spec, const std::vector<Framing>& framing,
                                 ScanResult& out) {
  const std::size_t n = framing.size();
  out.shards.resize(n);
  std::vector<std::vector<std::uint64_t>> group_counts(spec.groups);
  std::vector<std::size_t> in_group(n);
  for (std::size_t i = 0; i < n; ++i) {
    in_group[i] = group_counts[spec.group_of[i]].size();
    group_counts[spec.group_of[i]].push_back(framing[i].records);
    out.shards[i].records = framing[i].records;
    out.shards[i].bytes = framing[i].map ? framing[i].map->size() : 0;
  }
  for (auto& counts : group_counts) out.schedules.emplace_back(std::move(counts));
  return in_group;
}

// The chunks of every shard: the records between consecutive starts its framing found.
std::vector<Chunk> cut_chunks(const std::vector<Framing>& framing) {
  std::vector<Chunk> chunks;
  for (std::size_t i = 0; i < framing.size(); ++i) {
    const auto& starts = framing[i].starts;
    for (std::size_t k = 0; k < starts.size(); ++k) {
      const std::uint64_t end = k + 1 < starts.size() ? starts[k + 1].first : framing[i].records;
      if (end == starts[k].first) continue;
      Chunk& c = chunks.emplace_back();
      c.shard = i;
      c.first = starts[k].first;
      c.end = end;
      c.offset = starts[k].second;
    }
  }
  return chunks;
}

// The first problem of the first bad shard: a bad frame or record, then the framing, then
// the index.
void rethrow_first_problem(const std::vector<Framing>& framing, const std::vector<Chunk>& chunks) {
  std::vector<std::exception_ptr> first(framing.size());
  for (const auto& c : chunks)
    if (c.error && !first[c.shard]) first[c.shard] = c.error;
  for (std::size_t i = 0; i < framing.size(); ++i) {
    if (first[i]) std::rethrow_exception(first[i]);
    if (framing[i].error) std::rethrow_exception(framing[i].error);
    if (framing[i].index_error) std::rethrow_exception(framing[i].index_error);
  }
}

// Files' chunk-local label ids become names, sorted (numerically when every one is an int64,
// else bytewise), into `labels`; returns each chunk's local id -> final id.
std::vector<std::vector<std::size_t>> name_labels(const std::vector<Chunk>& chunks,
                                                  std::vector<std::string>& labels) {
  std::vector<std::vector<std::size_t>> remap(chunks.size());
  std::map<std::string, std::size_t> names;  // name -> provisional id
  bool all_int = true;
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    for (const auto& key : chunks[k].ids.keys()) {
      const auto [name, is_int] = label_name(key);
      all_int = all_int && is_int;
      remap[k].push_back(names.try_emplace(name, names.size()).first->second);
    }
  }
  std::vector<std::pair<std::string, std::size_t>> order(names.begin(), names.end());  // bytewise
  if (all_int) {
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return std::stoll(a.first) < std::stoll(b.first);
    });
  }
  std::vector<std::size_t> final_id(order.size());
  for (std::size_t id = 0; id < order.size(); ++id) {
    final_id[order[id].second] = id;
    labels.push_back(order[id].first);
  }
  for (auto& r : remap)
    for (auto& id : r) id = final_id[id];
  return remap;
}

// The chunks' counts summed into their shards and their groups' deciles, by final label id
// (`remap`: empty for datasets, whose ids are final already).
void merge_chunks(const ScanSpec& spec, const std::vector<Chunk>& chunks,
                  const std::vector<std::vector<std::size_t>>& remap, std::size_t labels,
                  ScanResult& out) {
  for (auto& s : out.shards) s.histogram.assign(labels, 0);
  out.decile_labels.resize(spec.groups);
  for (auto& g : out.decile_labels)
    for (auto& d : g) d.assign(labels, 0);
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    const Chunk& c = chunks[k];
    auto& shard = out.shards[c.shard];
    auto& deciles = out.decile_labels[spec.group_of[c.shard]];
    shard.unlabeled += c.unlabeled;
    shard.outcome.merge(c.outcome);
    for (std::size_t l = 0; l < c.histogram.size(); ++l) {
      const std::size_t id = spec.label_ids ? l : remap[k][l];
      shard.histogram[id] += c.histogram[l];
      for (int d = 0; d < kDeciles; ++d) deciles[d][id] += c.deciles[d][l];
    }
  }
}

}  // namespace

ScanResult scan_shards(const ScanSpec& spec) {
  const std::size_t n = spec.shards.size();
  std::vector<Framing> framing(n);
  util::parallel_for(n, spec.threads,
                     [&](std::size_t i) { framing[i] = walk_frames(spec.shards[i], spec.deep); });

  ScanResult out;
  const std::vector<std::size_t> in_group = lay_out(spec, framing, out);
  std::vector<Chunk> chunks = cut_chunks(framing);
  util::parallel_for(chunks.size(), spec.threads, [&](std::size_t k) {
    Chunk& c = chunks[k];
    try {
      ChunkReader(spec, framing[c.shard], out.schedules[spec.group_of[c.shard]], in_group[c.shard],
                  c)
          .run();
    } catch (...) {
      c.error = std::current_exception();
    }
  });
  rethrow_first_problem(framing, chunks);

  // Label ids: datasets' are final; files' chunk-local ids become names.
  std::vector<std::vector<std::size_t>> remap;
  if (!spec.label_ids) remap = name_labels(chunks, out.labels);
  const std::size_t labels = spec.label_ids ? *spec.label_ids : out.labels.size();
  merge_chunks(spec, chunks, remap, labels, out);
  return out;
}

}  // namespace mltool::records::detail
