// A strict, allocation-free scanner of serialized tf.train.Example records: it checks a record
// with exactly the strictness of parse_example (example.hpp) and pulls out the values of a
// few named features, without building protobuf messages or maps. `mltool inspect` reads
// every record of a dataset through it, where protobuf's parse would cost several times the
// I/O (docs/inspect.md#performance).
//
// Accepts what parse_example accepts and rejects what it rejects (tests/unit/
// io_example_scan_test.cpp holds the two against each other on valid and damaged records),
// including protobuf's merge rules: a feature name given twice keeps the last entry, two
// values in one entry merge, a value switching list kind drops the earlier values, and
// unknown fields inside an entry that a later entry of the same name replaces are forgotten.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mltool/io/example.hpp"

namespace mltool::io {

namespace wire {
struct Cursor;
}

class ExampleScanner {
 public:
  /// `names`: the features whose values scan() extracts, addressed by their position here.
  explicit ExampleScanner(std::vector<std::string> names);

  /// Scans one serialized record. Returns true for a valid tf.train.Example; false (with
  /// error() set, worded as parse_example's messages without the location prefix) for
  /// anything parse_example rejects. Views returned below point into `bytes` and hold
  /// until the next scan().
  bool scan(std::string_view bytes);
  /// Why the last scan() failed.
  const std::string& error() const { return error_; }

  /// Number of requested names.
  std::size_t size() const { return slots_.size(); }
  /// The requested name at `i`.
  const std::string& name(std::size_t i) const { return slots_[i].name; }
  /// Whether the record has feature `i`.
  bool has(std::size_t i) const { return slots_[i].present; }
  /// Its kind (none: no kind set, which reads as an empty list).
  FeatureKind kind(std::size_t i) const { return slots_[i].kind; }
  /// Its values; empty unless the feature has that kind.
  const std::vector<std::int64_t>& int64s(std::size_t i) const { return slots_[i].ints; }
  const std::vector<float>& floats(std::size_t i) const { return slots_[i].floats; }
  const std::vector<std::string_view>& bytes(std::size_t i) const { return slots_[i].strings; }

  /// Feature entries of the record whose name was not requested (a repeated name counts
  /// each time), and the name of the first one ("" if none).
  std::size_t other_features() const { return others_; }
  std::string_view first_other() const { return first_other_; }

 private:
  struct Slot {
    std::string name;
    bool present = false;
    FeatureKind kind = FeatureKind::none;
    std::vector<std::int64_t> ints;
    std::vector<float> floats;
    std::vector<std::string_view> strings;
  };
  // An unknown field inside an entry: fatal unless a later entry of that name replaces it.
  struct Pending {
    std::string_view key;
    std::string message;
  };

  bool features(wire::Cursor& in);
  int canonical_entry(const std::uint8_t* begin, const std::uint8_t* end);
  bool canonical_values(Slot* slot, FeatureKind kind, const std::uint8_t* payload,
                        const std::uint8_t* end);
  bool entry(const std::uint8_t* begin, const std::uint8_t* end);
  void forget_pending(std::string_view key);
  bool feature_value(wire::Cursor& in, Slot* slot, std::string_view key, FeatureKind& kind,
                     std::string& feature_problem, std::string& list_problem);
  bool list_values(wire::Cursor& in, FeatureKind kind, Slot* slot, std::string_view key,
                   std::string& list_problem);
  bool malformed();
  Slot* slot_for(std::string_view key);
  Slot* claim(std::string_view key, FeatureKind kind);

  static constexpr std::size_t kMaxHints = 64;

  std::vector<Slot> slots_;
  std::vector<std::size_t> hints_;  // entry position -> the slot it matched last time
  std::vector<Pending> pending_;
  std::string error_;
  std::string feature_problem_, list_problem_;
  std::size_t entries_ = 0;
  std::size_t record_size_ = 0;
  std::size_t others_ = 0;
  std::string_view first_other_;
};

}  // namespace mltool::io
