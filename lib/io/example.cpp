// tf.train.Example via the generated protobuf classes (schemas/example.proto). Parsing
// is strict: protobuf accepts almost any bytes as *some* message by filing what it does
// not recognise under unknown fields, so a record only counts as a tf.train.Example if
// nothing was left unrecognised at any level.
#include "mltool/io/example.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <climits>

#include "example.pb.h"
#include "example_wire.hpp"
#include "mltool/util/error.hpp"

namespace mltool::io {
namespace {

using ProtoKind = tfproto::Feature::KindCase;

const char* kind_name(ProtoKind kind) {
  switch (kind) {
    case tfproto::Feature::kBytesList: return "bytes_list";
    case tfproto::Feature::kFloatList: return "float_list";
    case tfproto::Feature::kInt64List: return "int64_list";
    case tfproto::Feature::KIND_NOT_SET: break;
  }
  return "none";
}

// The feature `name`, created if absent; a UsageError if it already holds another kind.
// Proto3 generated classes have no unknown_fields() accessor; reflection has.
const google::protobuf::UnknownFieldSet& unknown_fields(const google::protobuf::Message& m) {
  return m.GetReflection()->GetUnknownFields(m);
}

std::string unknown_field_message(const google::protobuf::UnknownFieldSet& unknown,
                                  const std::string& level) {
  return "not a tf.train.Example: " + level + " has field number " +
         std::to_string(unknown.field(0).number()) + ", which tf.train.Example does not define";
}

using wire::valid_utf8;  // the one strict UTF-8 check, shared with ExampleScanner

// Checks, on the wire, what the unknown-field sets cannot show: protobuf parses map
// entries with code that drops unrecognised fields instead of keeping them, so every
// entry of Features.feature must hold only key (1) and value (2), both length-delimited.
// Also checks that keys are UTF-8 before protobuf sees them, since protobuf would log
// to stderr about it. Runs before the real parse, so it must survive any bytes; its
// framing complaints are worded like a failed parse.
class WireCheck {
 public:
  explicit WireCheck(std::string_view bytes)
      : bytes_(bytes),
        in_(reinterpret_cast<const std::uint8_t*>(bytes.data()), static_cast<int>(bytes.size())) {}

  // "" when clean: Example's features (1), Features' map entries (1), each entry's fields.
  std::string run() {
    std::string problem =
        message_fields([this] { return message_fields([this] { return entry(); }); });
    if (!problem.empty()) return problem;
    return in_.ConsumedEntireMessage() ? std::string() : malformed();
  }

 private:
  static constexpr std::uint32_t kLengthDelimited = 2;
  static constexpr std::uint32_t kMessageField1 = (1u << 3) | kLengthDelimited;

  std::string malformed() const {
    return "not a tf.train.Example: protobuf parse failed (" + std::to_string(bytes_.size()) +
           " bytes)";
  }

  // A length must fit in the innermost enclosing message (or the buffer at top level).
  bool read_length(int& length) {
    std::uint32_t v;
    if (!in_.ReadVarint32(&v)) return false;
    const int until_limit = in_.BytesUntilLimit();  // -1: no limit pushed
    const std::size_t room = until_limit >= 0
                                 ? static_cast<std::size_t>(until_limit)
                                 : bytes_.size() - static_cast<std::size_t>(in_.CurrentPosition());
    if (v > room) return false;
    length = static_cast<int>(v);  // fits: bytes.size() <= INT_MAX was checked
    return true;
  }

  bool skip(std::uint32_t tag) {
    std::uint64_t v64;
    int length;
    switch (tag & 7u) {
      case 0: return in_.ReadVarint64(&v64);
      case 1: return in_.Skip(8);
      case 2: return read_length(length) && in_.Skip(length);
      case 5: return in_.Skip(4);
      default: return false;  // groups: never part of a tf.train.Example
    }
  }

  // The fields of a message up to its limit: each field 1 a message that `inner` checks
  // within its length, any other skipped (unknown fields are reported after the parse).
  template <class Inner>
  std::string message_fields(Inner inner) {
    while (const std::uint32_t tag = in_.ReadTag()) {
      if (tag != kMessageField1) {
        if (!skip(tag)) return malformed();
        continue;
      }
      int length;
      if (!read_length(length)) return malformed();
      const auto limit = in_.PushLimit(length);
      std::string problem = inner();
      if (!problem.empty()) return problem;
      if (!in_.ConsumedEntireMessage()) return malformed();
      in_.PopLimit(limit);
    }
    return {};
  }

  // A map entry of Features.feature: key (1, UTF-8) and value (2), length-delimited, only.
  std::string entry() {
    while (const std::uint32_t tag = in_.ReadTag()) {
      const std::uint32_t number = tag >> 3;
      if ((number != 1 && number != 2) || (tag & 7u) != kLengthDelimited) {
        return "not a tf.train.Example: a feature map entry has field number " +
               std::to_string(number) + " (wire type " + std::to_string(tag & 7u) +
               "), expected only key (1) and value (2)";
      }
      int length;
      if (!read_length(length)) return malformed();
      if (number == 1 && !valid_utf8(bytes_.substr(static_cast<std::size_t>(in_.CurrentPosition()),
                                                   static_cast<std::size_t>(length)))) {
        return "not a tf.train.Example: a feature name is not valid UTF-8";
      }
      if (!in_.Skip(length)) return malformed();
    }
    return {};
  }

  std::string_view bytes_;
  google::protobuf::io::CodedInputStream in_;
};

// "" when clean; see WireCheck.
std::string check_wire(std::string_view bytes) { return WireCheck(bytes).run(); }

// Empty-string result when every message of the parsed tree was fully recognised.
std::string check_unknown_fields(const tfproto::Example& example) {
  if (!unknown_fields(example).empty())
    return unknown_field_message(unknown_fields(example), "the Example message");
  const tfproto::Features& features = example.features();
  if (!unknown_fields(features).empty())
    return unknown_field_message(unknown_fields(features), "the Features message");
  for (const auto& [name, feature] : features.feature()) {
    const std::string level = "feature '" + name + "'";
    if (!unknown_fields(feature).empty())
      return unknown_field_message(unknown_fields(feature), level);
    const google::protobuf::UnknownFieldSet* list = nullptr;
    switch (feature.kind_case()) {
      case tfproto::Feature::kBytesList: list = &unknown_fields(feature.bytes_list()); break;
      case tfproto::Feature::kFloatList: list = &unknown_fields(feature.float_list()); break;
      case tfproto::Feature::kInt64List: list = &unknown_fields(feature.int64_list()); break;
      case tfproto::Feature::KIND_NOT_SET: break;
    }
    if (list && !list->empty())
      return unknown_field_message(*list, level + " (" + kind_name(feature.kind_case()) + ")");
  }
  return {};
}

std::string located(const std::string& where, const std::string& message) {
  return where.empty() ? message : where + ": " + message;
}

// A kind-less feature reads as an empty list of whatever type is asked for.
template <typename T, typename Variant>
const std::vector<T>& list_or_empty(const Variant& values) {
  static const std::vector<T> empty;
  const auto* list = std::get_if<std::vector<T>>(&values);
  return list ? *list : empty;
}

}  // namespace

const char* to_string(FeatureKind kind) {
  switch (kind) {
    case FeatureKind::bytes_list: return "bytes_list";
    case FeatureKind::float_list: return "float_list";
    case FeatureKind::int64_list: return "int64_list";
    case FeatureKind::none: break;
  }
  return "none";
}

// ---------------------------------------------------------------- Example

Example parse_example(std::string_view bytes, const std::string& where) {
  if (bytes.size() > static_cast<std::size_t>(INT_MAX)) {
    throw FormatError(located(where, "record of " + std::to_string(bytes.size()) +
                                         " bytes exceeds protobuf's 2 GiB message limit"));
  }
  std::string problem = check_wire(bytes);
  if (!problem.empty()) throw FormatError(located(where, problem));
  tfproto::Example message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    throw FormatError(located(where, "not a tf.train.Example: protobuf parse failed (" +
                                         std::to_string(bytes.size()) + " bytes)"));
  }
  problem = check_unknown_fields(message);
  if (!problem.empty()) throw FormatError(located(where, problem));

  Example example;
  example.where_ = where;
  for (const auto& [name, feature] : message.features().feature()) {
    Example::Values values;
    switch (feature.kind_case()) {
      case tfproto::Feature::kBytesList: {
        const auto& v = feature.bytes_list().value();
        values = std::vector<std::string>(v.begin(), v.end());
        break;
      }
      case tfproto::Feature::kFloatList: {
        const auto& v = feature.float_list().value();
        values = std::vector<float>(v.begin(), v.end());
        break;
      }
      case tfproto::Feature::kInt64List: {
        const auto& v = feature.int64_list().value();
        values = std::vector<std::int64_t>(v.begin(), v.end());
        break;
      }
      case tfproto::Feature::KIND_NOT_SET: break;
    }
    example.features_.emplace(name, std::move(values));
  }
  return example;
}

bool Example::has(const std::string& name) const { return features_.count(name) != 0; }

const Example::Values& Example::values(const std::string& name, FeatureKind wanted) const {
  const auto it = features_.find(name);
  if (it == features_.end()) {
    std::string present;
    std::size_t shown = 0;
    for (const auto& [n, v] : features_) {
      if (shown == 8) {
        present += ", ...";
        break;
      }
      present += (shown++ ? ", '" : "'") + n + "'";
    }
    throw FormatError(located(where_, "missing feature '" + name + "' (the record has " +
                                          (present.empty() ? "no features" : present) + ")"));
  }
  const auto kind = static_cast<FeatureKind>(it->second.index());
  if (wanted != FeatureKind::none && kind != FeatureKind::none && kind != wanted) {
    throw FormatError(located(where_, "feature '" + name + "' is of kind " + to_string(kind) +
                                          ", expected " + to_string(wanted)));
  }
  return it->second;
}

FeatureKind Example::kind(const std::string& name) const {
  return static_cast<FeatureKind>(values(name, FeatureKind::none).index());
}

const std::vector<std::int64_t>& Example::int64s(const std::string& name) const {
  return list_or_empty<std::int64_t>(values(name, FeatureKind::int64_list));
}

const std::vector<float>& Example::floats(const std::string& name) const {
  return list_or_empty<float>(values(name, FeatureKind::float_list));
}

const std::vector<std::string>& Example::bytes(const std::string& name) const {
  return list_or_empty<std::string>(values(name, FeatureKind::bytes_list));
}

std::int64_t Example::int64(const std::string& name) const {
  const auto& list = int64s(name);
  if (list.size() != 1) {
    throw FormatError(located(where_, "feature '" + name + "' has " + std::to_string(list.size()) +
                                          " values, expected exactly 1"));
  }
  return list.front();
}

std::vector<std::string> Example::names() const {
  std::vector<std::string> out;
  out.reserve(features_.size());
  for (const auto& [name, v] : features_) out.push_back(name);
  return out;
}

}  // namespace mltool::io
