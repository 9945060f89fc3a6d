// tf.train.Example records: building them and reading them back as plain C++.
// Protobuf is an implementation detail of io/example.cpp (schemas/example.proto);
// nothing here needs its headers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mltool::io {

/// The value kind of a feature, as in tf.train.Feature's oneof.
enum class FeatureKind {
  none,        ///< no kind set; TensorFlow reads it as an empty list of any type
  bytes_list,  ///< byte strings
  float_list,  ///< 32-bit floats
  int64_list,  ///< 64-bit integers
};

/// "bytes_list", "float_list", "int64_list" or "none" (for messages).
const char* to_string(FeatureKind kind);

/// Builds one tf.train.Example. Adding to an existing feature name appends to its list;
/// adding a different kind under the same name is a UsageError.
class ExampleBuilder {
 public:
  ExampleBuilder();
  ~ExampleBuilder();
  ExampleBuilder(ExampleBuilder&&) noexcept;
  ExampleBuilder& operator=(ExampleBuilder&&) noexcept;

  ExampleBuilder& add_int64(const std::string& name, std::int64_t value);
  ExampleBuilder& add_int64s(const std::string& name, const std::vector<std::int64_t>& values);
  ExampleBuilder& add_float(const std::string& name, float value);
  ExampleBuilder& add_floats(const std::string& name, const std::vector<float>& values);
  ExampleBuilder& add_bytes(const std::string& name, std::string_view value);
  ExampleBuilder& add_bytes_list(const std::string& name, const std::vector<std::string>& values);

  /// The wire bytes. Deterministic: features are written in name order, so equal
  /// contents give equal bytes (stable checksums, resumable jobs).
  std::string serialize() const;
  /// The same into `out` (replacing its contents, reusing its capacity).
  void serialize(std::string& out) const;

  /// Removes every feature, keeping allocations for the next record.
  void clear();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A parsed tf.train.Example. Accessors that name a missing feature or ask for the
/// wrong kind throw FormatError naming the feature and where the record came from.
class Example {
 public:
  /// True if the record has a feature `name`.
  bool has(const std::string& name) const;
  /// The kind of feature `name`.
  FeatureKind kind(const std::string& name) const;

  /// The values of an int64_list feature (a kind-less feature reads as empty).
  const std::vector<std::int64_t>& int64s(const std::string& name) const;
  /// The values of a float_list feature.
  const std::vector<float>& floats(const std::string& name) const;
  /// The values of a bytes_list feature.
  const std::vector<std::string>& bytes(const std::string& name) const;
  /// The single value of an int64_list feature; FormatError unless it has exactly one.
  std::int64_t int64(const std::string& name) const;

  /// Feature names, sorted.
  std::vector<std::string> names() const;
  /// Number of features.
  std::size_t size() const { return features_.size(); }
  /// Where the record came from, as given to parse_example.
  const std::string& where() const { return where_; }

 private:
  friend Example parse_example(std::string_view bytes, const std::string& where);
  // Alternatives in FeatureKind order after `none` (monostate).
  using Values = std::variant<std::monostate, std::vector<std::string>, std::vector<float>,
                              std::vector<std::int64_t>>;
  const Values& values(const std::string& name, FeatureKind wanted) const;

  std::map<std::string, Values> features_;
  std::string where_;
};

/// Parses a serialized tf.train.Example. `where` names the record in messages, e.g.
/// "shard.tfrecord: record 17 (byte 1234)". FormatError if the bytes are not a
/// tf.train.Example: unparseable, or carrying fields tf.train.Example does not have
/// (protobuf would keep those silently as unknown fields, which is how most random
/// bytes and other message types parse).
Example parse_example(std::string_view bytes, const std::string& where);

}  // namespace mltool::io
