// ExampleBuilder: tf.train.Example wire bytes written directly, without protobuf messages.
// The bytes are those of protobuf's deterministic serialization (map entries in key order,
// packed numeric lists, an empty list as an empty list message), so TensorFlow, protobuf
// and our parse_example read them, and equal contents give equal bytes:
//   Example   1: Features (absent when there is no feature)
//   Features  1: one map entry per feature, by name: 1: name, 2: Feature
//   Feature   1: BytesList {1: each value} | 2: FloatList {1: packed f32 LE}
//             | 3: Int64List {1: packed varints (two's complement, ten bytes if negative)}
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "mltool/io/example.hpp"
#include "mltool/util/error.hpp"

namespace mltool::io {
namespace {

struct Feature {
  std::string name;
  FeatureKind kind = FeatureKind::none;
  std::vector<std::int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> bytes;
  std::size_t bytes_used = 0;  // bytes[0..bytes_used): the values (the rest keep their capacity)
  std::size_t payload = 0;     // filled by serialize(): the packed values' size (numeric lists)
  std::size_t list_size = 0;   // the list message's size
  std::size_t feature_size = 0;
  std::size_t entry_size = 0;
};

std::size_t varint_size(std::uint64_t v) {
  std::size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

char* put_varint(char* p, std::uint64_t v) {
  for (; v >= 0x80; v >>= 7) *p++ = static_cast<char>(v | 0x80);
  *p++ = static_cast<char>(v);
  return p;
}

// A length-delimited field's tag and length.
char* put_len(char* p, int field, std::size_t size) {
  *p++ = static_cast<char>(field << 3 | 2);
  return put_varint(p, size);
}

std::size_t len_field_size(std::size_t payload) { return 1 + varint_size(payload) + payload; }

int list_field(FeatureKind kind) {
  switch (kind) {
    case FeatureKind::bytes_list: return 1;
    case FeatureKind::float_list: return 2;
    case FeatureKind::int64_list: return 3;
    case FeatureKind::none: break;
  }
  return 0;
}

}  // namespace

struct ExampleBuilder::Impl {
  std::vector<Feature> features;  // [0..used): this record's; the rest are kept for reuse
  std::size_t used = 0;
  std::vector<std::size_t> order;  // by name, for serialize()

  Feature& feature_for(const std::string& name, FeatureKind kind) {
    for (std::size_t i = 0; i < used; ++i) {
      Feature& f = features[i];
      if (f.name != name) continue;
      if (f.kind != kind) {
        throw UsageError("ExampleBuilder: feature '" + name + "' is of kind " + to_string(f.kind) +
                         ", cannot add " + to_string(kind) + " values to it");
      }
      return f;
    }
    if (used == features.size()) features.emplace_back();
    Feature& f = features[used++];
    f.name = name;
    f.kind = kind;
    f.ints.clear();
    f.floats.clear();
    f.bytes_used = 0;
    return f;
  }
};

ExampleBuilder::ExampleBuilder() : impl_(std::make_unique<Impl>()) {}
ExampleBuilder::~ExampleBuilder() = default;
ExampleBuilder::ExampleBuilder(ExampleBuilder&&) noexcept = default;
ExampleBuilder& ExampleBuilder::operator=(ExampleBuilder&&) noexcept = default;

ExampleBuilder& ExampleBuilder::add_int64(const std::string& name, std::int64_t value) {
  impl_->feature_for(name, FeatureKind::int64_list).ints.push_back(value);
  return *this;
}

ExampleBuilder& ExampleBuilder::add_int64s(const std::string& name,
                                           const std::vector<std::int64_t>& values) {
  auto& ints = impl_->feature_for(name, FeatureKind::int64_list).ints;
  ints.insert(ints.end(), values.begin(), values.end());
  return *this;
}

ExampleBuilder& ExampleBuilder::add_float(const std::string& name, float value) {
  impl_->feature_for(name, FeatureKind::float_list).floats.push_back(value);
  return *this;
}

ExampleBuilder& ExampleBuilder::add_floats(const std::string& name,
                                           const std::vector<float>& values) {
  auto& floats = impl_->feature_for(name, FeatureKind::float_list).floats;
  floats.insert(floats.end(), values.begin(), values.end());
  return *this;
}

ExampleBuilder& ExampleBuilder::add_bytes(const std::string& name, std::string_view value) {
  Feature& f = impl_->feature_for(name, FeatureKind::bytes_list);
  if (f.bytes_used == f.bytes.size()) f.bytes.emplace_back();
  f.bytes[f.bytes_used++].assign(value.data(), value.size());
  return *this;
}

ExampleBuilder& ExampleBuilder::add_bytes_list(const std::string& name,
                                               const std::vector<std::string>& values) {
  for (const std::string& v : values) add_bytes(name, v);
  if (values.empty()) impl_->feature_for(name, FeatureKind::bytes_list);
  return *this;
}

void ExampleBuilder::serialize(std::string& out) const {
  Impl& m = *impl_;
  out.clear();
  if (m.used == 0) return;  // no Features message at all, as protobuf writes a cleared Example
  m.order.resize(m.used);
  for (std::size_t i = 0; i < m.used; ++i) m.order[i] = i;
  std::sort(m.order.begin(), m.order.end(),
            [&m](std::size_t a, std::size_t b) { return m.features[a].name < m.features[b].name; });

  std::size_t features_size = 0;
  for (std::size_t i = 0; i < m.used; ++i) {
    Feature& f = m.features[i];
    if (f.kind == FeatureKind::int64_list) {
      f.payload = 0;
      for (const std::int64_t v : f.ints) f.payload += varint_size(static_cast<std::uint64_t>(v));
      f.list_size = f.payload > 0 ? len_field_size(f.payload) : 0;
    } else if (f.kind == FeatureKind::float_list) {
      f.payload = 4 * f.floats.size();
      f.list_size = f.payload > 0 ? len_field_size(f.payload) : 0;
    } else {
      f.list_size = 0;
      for (std::size_t b = 0; b < f.bytes_used; ++b)
        f.list_size += len_field_size(f.bytes[b].size());
    }
    f.feature_size = len_field_size(f.list_size);
    f.entry_size = len_field_size(f.name.size()) + len_field_size(f.feature_size);
    features_size += len_field_size(f.entry_size);
  }
  const std::size_t total = len_field_size(features_size);
  if (total > static_cast<std::size_t>(INT32_MAX)) {
    throw UsageError("ExampleBuilder: an Example of " + std::to_string(total) +
                     " bytes exceeds protobuf's 2 GiB message limit");
  }

  out.resize(total);
  char* p = put_len(out.data(), 1, features_size);
  for (const std::size_t i : m.order) {
    const Feature& f = m.features[i];
    p = put_len(p, 1, f.entry_size);
    p = put_len(p, 1, f.name.size());
    std::memcpy(p, f.name.data(), f.name.size());
    p += f.name.size();
    p = put_len(p, 2, f.feature_size);
    p = put_len(p, list_field(f.kind), f.list_size);
    if (f.kind == FeatureKind::int64_list) {
      if (f.payload == 0) continue;
      p = put_len(p, 1, f.payload);
      for (const std::int64_t v : f.ints) p = put_varint(p, static_cast<std::uint64_t>(v));
    } else if (f.kind == FeatureKind::float_list) {
      if (f.payload == 0) continue;
      p = put_len(p, 1, f.payload);
      for (const float v : f.floats) {  // little-endian, as the wire is
        std::uint32_t bits;
        std::memcpy(&bits, &v, 4);
        for (int k = 0; k < 4; ++k) *p++ = static_cast<char>(bits >> (8 * k));
      }
    } else {
      for (std::size_t b = 0; b < f.bytes_used; ++b) {
        p = put_len(p, 1, f.bytes[b].size());
        std::memcpy(p, f.bytes[b].data(), f.bytes[b].size());
        p += f.bytes[b].size();
      }
    }
  }
  if (p != out.data() + out.size()) throw std::logic_error("ExampleBuilder: size mismatch");
}

std::string ExampleBuilder::serialize() const {
  std::string out;
  serialize(out);
  return out;
}

void ExampleBuilder::clear() { impl_->used = 0; }

}  // namespace mltool::io
