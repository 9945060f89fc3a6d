// ExampleScanner: tf.train.Example's wire format walked by hand, with protobuf 3.21's parse
// rules (the library parse_example uses) wherever they decide between accepting and refusing:
// - tags are varints of at most 5 bytes (taken modulo 2^32), lengths of at most 5 bytes that
//   must fit in the enclosing message, values at most 10 bytes (taken modulo 2^64);
// - tag 0, field number 0, an end-group tag outside its group, wire types 6 and 7, and
//   anything truncated fail the parse; an unknown field of a valid wire type (groups
//   included, nested up to protobuf's recursion limit) parses, and then parse_example
//   refuses it as a field tf.train.Example does not define;
// - a map entry may hold only key (1) and value (2), length-delimited, and every key must be
//   UTF-8 (parse_example's wire check); a later entry of the same name replaces an earlier
//   one (with its unknown fields); values within one entry merge; switching a Feature's
//   list kind drops the earlier list (and its unknown fields).
#include "mltool/io/example_scan.hpp"

#include <climits>
#include <cstring>

#include "example_wire.hpp"

namespace mltool::io {
namespace {

using wire::Cursor;
using wire::kFeatureDepth;
using wire::kListDepth;
using wire::valid_utf8;

std::string unknown_field(const std::string& level, std::uint32_t number) {
  return "not a tf.train.Example: " + level + " has field number " + std::to_string(number) +
         ", which tf.train.Example does not define";
}

std::string feature_level(std::string_view key) { return "feature '" + std::string(key) + "'"; }

}  // namespace

ExampleScanner::ExampleScanner(std::vector<std::string> names) {
  slots_.resize(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) slots_[i].name = std::move(names[i]);
}

__attribute__((noinline, cold)) bool ExampleScanner::malformed() {
  error_ =
      "not a tf.train.Example: protobuf parse failed (" + std::to_string(record_size_) + " bytes)";
  return false;
}

namespace {
// Names are short: an inline comparison beats a call to memcmp per entry.
MLTOOL_HOT bool same_name(const std::string& name, std::string_view key) {
  if (name.size() != key.size()) return false;
  for (std::size_t i = 0; i < key.size(); ++i)
    if (name[i] != key[i]) return false;
  return true;
}
}  // namespace

MLTOOL_HOT ExampleScanner::Slot* ExampleScanner::slot_for(std::string_view key) {
  // Records of one file usually list the same names in the same order: try the slot the
  // entry at this position matched in the previous record first.
  const std::size_t at = entries_++;
  if (at < hints_.size() && hints_[at] < slots_.size() && same_name(slots_[hints_[at]].name, key))
    return &slots_[hints_[at]];
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (!same_name(slots_[i].name, key)) continue;
    if (at < kMaxHints) {
      if (hints_.size() <= at) hints_.resize(at + 1, SIZE_MAX);
      hints_[at] = i;
    }
    return &slots_[i];
  }
  return nullptr;
}

bool ExampleScanner::scan(std::string_view bytes) {
  for (auto& s : slots_) {
    s.present = false;
    s.kind = FeatureKind::none;
    s.ints.clear();
    s.floats.clear();
    s.strings.clear();
  }
  pending_.clear();
  error_.clear();
  entries_ = 0;
  others_ = 0;
  first_other_ = {};
  record_size_ = bytes.size();
  if (bytes.size() > static_cast<std::size_t>(INT_MAX)) {
    error_ = "record of " + std::to_string(bytes.size()) +
             " bytes exceeds protobuf's 2 GiB message limit";
    return false;
  }
  const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data());
  Cursor in{data, data + bytes.size()};
  while (!in.done()) {
    std::uint32_t t;
    if (!in.tag(t)) return malformed();
    if (t != (1u << 3 | 2u)) {
      if (!in.skip_field(t, 0)) return malformed();
      error_ = unknown_field("the Example message", t >> 3);
      return false;
    }
    std::size_t n;
    if (!in.length(n)) return malformed();
    Cursor sub{in.p, in.p + n};
    in.p += n;
    if (!features(sub)) return false;
  }
  if (!pending_.empty()) {
    error_ = pending_.front().message;
    return false;
  }
  return true;
}

// A later entry of the same name replaces an earlier one, with its unknown fields.
__attribute__((noinline)) void ExampleScanner::forget_pending(std::string_view key) {
  for (std::size_t i = 0; i < pending_.size();) {
    if (pending_[i].key == key) {
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

MLTOOL_HOT bool ExampleScanner::features(wire::Cursor& in) {
  while (!in.done()) {
    std::uint32_t t;
    if (!in.tag(t)) return malformed();
    if (t != (1u << 3 | 2u)) {
      if (!in.skip_field(t, 0)) return malformed();
      error_ = unknown_field("the Features message", t >> 3);
      return false;
    }
    std::size_t n;
    if (!in.length(n)) return malformed();
    const std::uint8_t* begin = in.p;
    in.p += n;
    int done = canonical_entry(begin, in.p);
    if (done < 0) done = entry(begin, in.p);
    if (done == 0) return false;
  }
  return true;
}

namespace {

// An entry of the canonical shape (see canonical_entry), located.
struct CanonicalShape {
  std::string_view key;
  std::uint8_t list_tag = 0;           // 0A bytes, 12 floats, 1A int64s
  const std::uint8_t* list = nullptr;  // the list message; the entry's end when it is absent
};

inline std::size_t span(const std::uint8_t* from, const std::uint8_t* to) {
  return static_cast<std::size_t>(to - from);
}

// True when [b, e) is one key, then one value holding one list, with one-byte lengths that
// nest exactly.
MLTOOL_HOT bool canonical_shape(const std::uint8_t* b, const std::uint8_t* e, CanonicalShape& out) {
  if (span(b, e) < 4 || b[0] != 0x0a || b[1] >= 0x80) return false;
  const std::uint8_t* v = b + 2 + b[1];  // the value's tag
  if (span(b, e) < 4u + b[1] || v[0] != 0x12 || v[1] >= 0x80 || span(v, e) != 2u + v[1])
    return false;
  const std::uint8_t* l = v + 2;  // the list's tag, inside the Feature
  if (l == e) return false;       // a Feature without a kind
  if (span(l, e) < 2 || (l[0] != 0x0a && l[0] != 0x12 && l[0] != 0x1a) || l[1] >= 0x80 ||
      span(l, e) != 2u + l[1])
    return false;
  const std::uint8_t* x = l + 2;  // the list message
  if (x != e && (span(x, e) < 2 || x[0] != 0x0a || x[1] >= 0x80 || span(x, e) != 2u + x[1]))
    return false;
  out.key = std::string_view(reinterpret_cast<const char*>(b + 2), b[1]);
  out.list_tag = l[0];
  out.list = x;
  return true;
}

}  // namespace

// A later entry of the same name replaces an earlier one: its slot starts again with `kind`.
// An entry whose name was not requested is counted.
MLTOOL_HOT ExampleScanner::Slot* ExampleScanner::claim(std::string_view key, FeatureKind kind) {
  Slot* slot = slot_for(key);
  if (slot) {
    slot->present = true;
    slot->kind = kind;
    slot->ints.clear();
    slot->floats.clear();
    slot->strings.clear();
  } else if (others_++ == 0) {
    first_other_ = key;
  }
  return slot;
}

// The shape writers (TensorFlow, protobuf, mltool) give nearly every entry: key, then one
// value holding one list, all with one-byte lengths that nest exactly:
//   0A kl KEY 12 vl [0A|12|1A] ll [0A pl PAYLOAD]
// Such an entry means exactly what the general walk (entry()) would make of it, so it is read
// in straight-line code. Returns 1 when read, 0 when the record is refused (error() set), -1
// when the entry has another shape and entry() must read it.
MLTOOL_HOT int ExampleScanner::canonical_entry(const std::uint8_t* b, const std::uint8_t* e) {
  CanonicalShape shape;
  if (!canonical_shape(b, e, shape)) return -1;
  if (!valid_utf8(shape.key)) {
    error_ = "not a tf.train.Example: a feature name is not valid UTF-8";
    return 0;
  }
  const FeatureKind kind = shape.list_tag == 0x0a   ? FeatureKind::bytes_list
                           : shape.list_tag == 0x12 ? FeatureKind::float_list
                                                    : FeatureKind::int64_list;
  const std::uint8_t* x = shape.list;
  const std::uint8_t* payload = x + 2;
  if (x != e && kind == FeatureKind::float_list && span(payload, e) % 4 != 0) return malformed();
  Slot* slot = claim(shape.key, kind);
  if (x != e && !canonical_values(slot, kind, payload, e)) return malformed();
  if (!pending_.empty()) forget_pending(shape.key);
  return 1;
}

// The payload of a canonical entry's list, [payload, e), into `slot` (null: checked only).
// False when packed varints do not exactly fill it.
MLTOOL_HOT bool ExampleScanner::canonical_values(Slot* slot, FeatureKind kind,
                                                 const std::uint8_t* payload,
                                                 const std::uint8_t* e) {
  if (kind == FeatureKind::int64_list) {  // packed varints, exactly filling the payload
    Cursor packed{payload, e};
    std::uint64_t value;
    while (!packed.done()) {
      if (!packed.varint(value)) return false;
      if (slot) slot->ints.push_back(static_cast<std::int64_t>(value));
    }
  } else if (slot && kind == FeatureKind::bytes_list) {
    slot->strings.emplace_back(reinterpret_cast<const char*>(payload), span(payload, e));
  } else if (slot && payload != e) {  // memcpy into an empty vector's null data() is UB
    slot->floats.resize(span(payload, e) / 4);
    std::memcpy(slot->floats.data(), payload, span(payload, e));  // little-endian hosts only
  }
  return true;
}

MLTOOL_HOT bool ExampleScanner::entry(const std::uint8_t* begin, const std::uint8_t* end) {
  // First the entry's own fields and its key, which may come after the value.
  std::string_view key;
  const std::uint8_t* value = nullptr;
  std::size_t value_size = 0, values = 0;
  Cursor in{begin, end};
  while (!in.done()) {
    std::uint32_t t;
    if (!in.raw_tag(t) || t == 0) return malformed();
    const std::uint32_t number = t >> 3;
    if ((number != 1 && number != 2) || (t & 7u) != 2) {
      error_ = "not a tf.train.Example: a feature map entry has field number " +
               std::to_string(number) + " (wire type " + std::to_string(t & 7u) +
               "), expected only key (1) and value (2)";
      return false;
    }
    std::size_t n;
    if (!in.length(n)) return malformed();
    if (number == 1) {
      key = {reinterpret_cast<const char*>(in.p), n};
      if (!valid_utf8(key)) {
        error_ = "not a tf.train.Example: a feature name is not valid UTF-8";
        return false;
      }
    } else if (values++ == 0) {
      value = in.p;
      value_size = n;
    }
    in.p += n;
  }

  Slot* slot = claim(key, FeatureKind::none);
  FeatureKind kind = FeatureKind::none;
  std::string& feature_problem = feature_problem_;  // unknown fields: in the Feature,
  std::string& list_problem = list_problem_;        // in its list
  feature_problem.clear();
  list_problem.clear();
  if (values == 1) {  // the usual entry: one key, one value
    Cursor v{value, value + value_size};
    if (!feature_value(v, slot, key, kind, feature_problem, list_problem)) return false;
  } else if (values > 1) {  // values merge, in order
    in = Cursor{begin, end};
    while (!in.done()) {
      std::uint32_t t = 0;
      std::size_t n = 0;
      in.tag(t);  // both checked above
      in.length(n);
      if ((t >> 3) == 2) {
        Cursor v{in.p, in.p + n};
        if (!feature_value(v, slot, key, kind, feature_problem, list_problem)) return false;
      }
      in.p += n;
    }
  }

  if (!pending_.empty()) forget_pending(key);
  if (!feature_problem.empty()) {
    pending_.push_back({key, feature_problem});
  } else if (!list_problem.empty()) {
    pending_.push_back({key, list_problem});
  }
  return true;
}

MLTOOL_HOT bool ExampleScanner::feature_value(Cursor& in, Slot* slot, std::string_view key,
                                              FeatureKind& kind, std::string& feature_problem,
                                              std::string& list_problem) {
  while (!in.done()) {
    std::uint32_t t;
    if (!in.tag(t)) return malformed();
    const std::uint32_t number = t >> 3;
    if (number > 3 || (t & 7u) != 2) {
      if (!in.skip_field(t, kFeatureDepth)) return malformed();
      if (feature_problem.empty()) feature_problem = unknown_field(feature_level(key), number);
      continue;
    }
    std::size_t n;
    if (!in.length(n)) return malformed();
    Cursor list{in.p, in.p + n};
    in.p += n;
    const FeatureKind k = number == 1   ? FeatureKind::bytes_list
                          : number == 2 ? FeatureKind::float_list
                                        : FeatureKind::int64_list;
    if (k != kind) {  // protobuf's oneof: the earlier list is dropped
      kind = k;
      list_problem.clear();
      if (slot) {
        slot->kind = k;
        slot->ints.clear();
        slot->floats.clear();
        slot->strings.clear();
      }
    }
    if (!list_values(list, k, slot, key, list_problem)) return false;
  }
  return true;
}

namespace {

// What a field of a value list was: a value read, another field (skipped by the caller, and an
// unknown field unless a later list replaces it), or malformed.
enum class ValueField { read, other, malformed };

// A bytes_list value (wire type 2), into `out` when given.
MLTOOL_HOT ValueField bytes_value(Cursor& in, std::uint32_t wire,
                                  std::vector<std::string_view>* out) {
  if (wire != 2) return ValueField::other;
  std::size_t n;
  if (!in.length(n)) return ValueField::malformed;
  if (out) out->emplace_back(reinterpret_cast<const char*>(in.p), n);
  in.p += n;
  return ValueField::read;
}

// An int64_list value (wire type 0) or a packed run of them (2), into `out` when given.
MLTOOL_HOT ValueField int_values(Cursor& in, std::uint32_t wire, std::vector<std::int64_t>* out) {
  std::uint64_t v;
  if (wire == 0) {
    if (!in.varint(v)) return ValueField::malformed;
    if (out) out->push_back(static_cast<std::int64_t>(v));
    return ValueField::read;
  }
  if (wire != 2) return ValueField::other;
  std::size_t n;
  if (!in.length(n)) return ValueField::malformed;
  Cursor packed{in.p, in.p + n};
  in.p += n;
  while (!packed.done()) {
    if (!packed.varint(v)) return ValueField::malformed;
    if (out) out->push_back(static_cast<std::int64_t>(v));
  }
  return ValueField::read;
}

// A float_list value (wire type 5) or a packed run of them (2), into `out` when given.
MLTOOL_HOT ValueField float_values(Cursor& in, std::uint32_t wire, std::vector<float>* out) {
  if (wire != 5 && wire != 2) return ValueField::other;
  std::size_t n = 4;
  if (wire == 2 && (!in.length(n) || n % 4 != 0)) return ValueField::malformed;
  if (n > in.left()) return ValueField::malformed;
  if (out && n != 0) {  // an empty packed list: nothing to copy (and data() may be null)
    const std::size_t at = out->size();
    out->resize(at + n / 4);
    std::memcpy(out->data() + at, in.p, n);  // little-endian hosts only
  }
  in.p += n;
  return ValueField::read;
}

}  // namespace

MLTOOL_HOT bool ExampleScanner::list_values(Cursor& in, FeatureKind kind, Slot* slot,
                                            std::string_view key, std::string& list_problem) {
  while (!in.done()) {
    std::uint32_t t;
    if (!in.tag(t)) return malformed();
    const std::uint32_t wire = t & 7u;
    ValueField field = ValueField::other;
    if ((t >> 3) == 1 && kind == FeatureKind::bytes_list)
      field = bytes_value(in, wire, slot ? &slot->strings : nullptr);
    else if ((t >> 3) == 1 && kind == FeatureKind::int64_list)
      field = int_values(in, wire, slot ? &slot->ints : nullptr);
    else if ((t >> 3) == 1 && kind == FeatureKind::float_list)
      field = float_values(in, wire, slot ? &slot->floats : nullptr);
    if (field == ValueField::malformed) return malformed();
    if (field == ValueField::read) continue;
    if (!in.skip_field(t, kListDepth)) return malformed();
    if (list_problem.empty())
      list_problem = unknown_field(feature_level(key) + " (" + to_string(kind) + ")", t >> 3);
  }
  return true;
}

}  // namespace mltool::io
